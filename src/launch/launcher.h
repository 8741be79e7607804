// The launcher: `ddptrain launch --nproc_per_node N [--nnodes M --node_rank R --master_addr A
// --master_port P] train [train flags]` (or any PROGRAM [ARGS...], as torchrun --no-python
// runs it) starts N local workers of this binary with the
// torchrun environment contract (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,
// MASTER_ADDR, MASTER_PORT, and torchrun's ROLE_*, GROUP_WORLD_SIZE, TORCHELASTIC_*), prefixes
// their output lines with `[rank]`, forwards SIGINT, and SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2
// as SIGTERM, and when a
// worker fails stops the others (SIGTERM, then SIGKILL after a grace period) and exits non-zero
// naming the first failed rank and its exit code or signal. Each worker leads a session and
// process group of its own (as torchrun's start_new_session), and the launcher signals the
// whole group, so a worker that is a script stops with the program it runs; workers die with the launcher
// (PR_SET_PDEATHSIG). With --max_restarts N (one node: the nodes' launchers do not agree on
// attempts; torchrun's rendezvous restarts a multi-node job) a failed group is restarted
// (TORCHELASTIC_RESTART_COUNT counts the attempts) with `--resume_from auto`. Each worker writes its fatal
// error to the file named by TORCHELASTIC_ERROR_FILE (as under torchrun); the final report quotes the first
// failure's. With --stall_s S a collective that waits S seconds on a rank ends the group with the flight
// recorder's verdict (launch/stall_watch.h).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "config/flag_table.h"

namespace ddptrain {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int kill_grace_s = 5;  // after the first failure, SIGTERM then SIGKILL after this long
  /// After a SIGINT/SIGTERM forwarded to the workers: the time they get to finish their step and
  /// save (--checkpoint_on_signal) before SIGKILL; a second signal, a second or more after the
  /// first (one signal can arrive twice: a hang-up), sends SIGKILL at once.
  int signal_grace_s = 60;
  int max_restarts = 0;  // restarts of the whole group after a failure
  /// A rank waiting this long in one collective is a hang (Note [Stall seen by the launcher]):
  /// every rank writes its flight record, the launcher prints the verdict and stops the group.
  /// 0: off (the collective timeout, --dist_timeout_s, ends a hang).
  double stall_s = 0;
  /// Added to every worker's environment (e.g. OMP_WAIT_POLICY; see Note [OpenMP threads of
  /// ranks that share cores]). Not a flag: the launch command decides.
  std::vector<std::pair<std::string, std::string>> worker_env;
  /// A `train` worker's resume_from as its flags and --config resolve it: a restart resumes
  /// there when the group saved nothing yet (--resume_fallback). Not a flag: the launch command
  /// resolves it.
  std::string first_resume_from;
  /// Whether a train worker saves checkpoints (--checkpoint_dir not ''): a restart resumes
  /// only then.
  bool worker_saves = true;
};

std::vector<Flag> launch_flags(LaunchOptions& o);
extern const char* const kLaunchUsage;

/// Where the launch flags end in `launch` args: the first argument that is neither a flag nor
/// a flag's value (each launch flag takes one); the worker command starts there.
size_t launch_flags_end(const std::vector<std::string>& args);

/// Whether the worker command is one of ddptrain's own (run as this binary) rather than a
/// program of its own.
bool is_ddptrain_command(const std::string& name);

/// Splits `launch` args into launcher flags and the worker command (a ddptrain command such
/// as `train`, or any PROGRAM); UsageError when invalid. Returns the worker args.
std::vector<std::string> parse_launch_args(const std::vector<std::string>& args, LaunchOptions* opts);

/// Runs the workers to completion: `self_exe worker_args...` for ddptrain's commands, else the
/// program worker_args[0] (a path, or found on PATH) with the rest; returns the exit code.
/// Restarts add `--resume_from auto` to `train` only.
int run_launcher(const LaunchOptions& opts, const std::string& self_exe,
                 const std::vector<std::string>& worker_args);

}  // namespace ddptrain
