#include "launch/worker_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "util/error.h"

namespace ddptrain {

namespace {

// Set for a worker by this launcher alone, never inherited from the launcher's own environment.
constexpr const char* kNotInherited[] = {"DDPTRAIN_LAUNCH_DIR"};

// The worker's environment: the launcher's, less what it never passes on and what `env` sets,
// then `env`. Made before the fork: the launcher has threads (its output writers), and a child
// of a process with threads should only exec.
std::vector<std::string> worker_environment(const std::vector<std::pair<std::string, std::string>>& env) {
  const auto set_here = [&](const std::string& name) {
    for (const char* n : kNotInherited)
      if (name == n) return true;
    for (const auto& kv : env)
      if (kv.first == name) return true;
    return false;
  };
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    if (!set_here(entry.substr(0, entry.find('=')))) out.push_back(entry);
  }
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

pid_t spawn_worker_process(const std::string& exe, const std::vector<std::string>& args,
                           const std::vector<std::pair<std::string, std::string>>& env, int* out_fd,
                           int* err_fd) {
  std::vector<std::string> argv_strings{exe};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<std::string> env_strings = worker_environment(env);
  const std::vector<char*> argv = pointers(argv_strings), envp = pointers(env_strings);
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  const auto close_all = [&] {
    for (const int fd : {out[0], out[1], err[0], err[1]})
      if (fd >= 0) ::close(fd);
  };
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    const int e = errno;
    close_all();
    throw Error(str("pipe failed: ", std::strerror(e)));
  }
  // The launcher's signals wait while the child is not yet its own program: one that reached
  // the child before its exec would run the launcher's handler there and be lost (forwarded
  // once, the worker would run on until --signal_grace_s).
  const sigset_t launcher_signals = launcher_signal_set();
  sigset_t before;
  ::pthread_sigmask(SIG_BLOCK, &launcher_signals, &before);
  pid_t launcher = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
    close_all();
    throw Error(str("fork failed: ", std::strerror(e)));
  }
  if (pid == 0) {
    // Child: die with the launcher, whatever kills it.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (const int sig : kLauncherSignals) {  // the launcher's handler goes; an ignored signal stays ignored
      struct sigaction old {};
      if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler != SIG_IGN) ::signal(sig, SIG_DFL);
    }
    ::pthread_sigmask(SIG_SETMASK, &before, nullptr);  // one sent meanwhile ends the child now
    if (::getppid() != launcher) ::_exit(127);
    // A session and process group of its own, as torchrun's start_new_session: the launcher
    // signals the group whole, a terminal's Ctrl-C reaches the launcher alone, and no worker is
    // stopped by reading a terminal it does not own (the launcher's handlers end at exec; a
    // signal nohup ignored stays ignored).
    ::setsid();
    ::signal(SIGPIPE, SIG_DFL);  // the launcher ignores it; an ignored signal survives exec
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
#ifdef SYS_close_range
    ::syscall(SYS_close_range, 3U, ~0U, 0U);  // nothing the launcher inherited (a jobserver's pipes)
#endif
    ::execve(exe.c_str(), argv.data(), envp.data());
    // Async-signal-safe calls only (the launcher has threads): no stdio, no allocation.
    const int e = errno;
    const char* const parts[] = {"launch: exec of ", exe.c_str(), " failed: ", strerror(e), "\n"};
    for (const char* part : parts)
      if (::write(2, part, std::strlen(part)) < 0) break;
    ::_exit(127);
  }
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  ::close(out[1]);
  ::close(err[1]);
  *out_fd = out[0];
  *err_fd = err[0];
  return pid;
}

std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    DDP_USAGE_CHECK(::access(name.c_str(), X_OK) == 0, "launch: '", name, "' is not an executable file");
    return name;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string candidate = (end > start ? dirs.substr(start, end - start) : ".") + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate)) return candidate;
    start = end + 1;
  }
  throw UsageError(detail::concat("launch: '", name,
                                  "' is neither a ddptrain command (train, eval) nor a program on "
                                  "PATH; give its path"));
}

}  // namespace ddptrain
