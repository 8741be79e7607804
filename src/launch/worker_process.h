// A worker's process: the program it runs, and its start in a session of its own with the
// launcher's pipes for its output.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace ddptrain {

/// What the launcher handles (the last four where not ignored), and blocks while it forks.
inline constexpr int kLauncherSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

/// kLauncherSignals as a set, for sigprocmask.
inline sigset_t launcher_signal_set() {
  sigset_t set;
  ::sigemptyset(&set);
  for (const int sig : kLauncherSignals) ::sigaddset(&set, sig);
  return set;
}

/// Starts `exe` with `args` and `env` added to this process's environment (less what only
/// the launcher sets), its stdout and stderr into pipes whose read ends it returns; it dies
/// with the launcher (PR_SET_PDEATHSIG). Error where a pipe or the fork fails.
pid_t spawn_worker_process(const std::string& exe, const std::vector<std::string>& args,
                           const std::vector<std::pair<std::string, std::string>>& env, int* out_fd,
                           int* err_fd);

/// PROGRAM as execv takes it: a path as given, or the first match on PATH; UsageError if none.
std::string find_program(const std::string& name);

}  // namespace ddptrain
