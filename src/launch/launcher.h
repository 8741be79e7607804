// The launcher: `ddptrain launch --nproc_per_node N [--nnodes M --node_rank R --master_addr A
// --master_port P] train [train flags]` starts N local workers of this binary with the
// torchrun environment contract (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,
// MASTER_ADDR, MASTER_PORT), prefixes their output lines with `[rank]`, forwards SIGINT and
// SIGTERM, and when a worker fails stops the others (SIGTERM, then SIGKILL after a grace
// period) and exits non-zero naming the first failed rank and its exit code or signal.
// Workers die with the launcher (PR_SET_PDEATHSIG), so none is ever left behind.
// With --max_restarts N a failed group is restarted (TORCHELASTIC_RESTART_COUNT counts the
// attempts) with `--resume_from auto`. Each worker writes its fatal error to the file named by
// TORCHELASTIC_ERROR_FILE (as under torchrun); the final report quotes the first failure's.
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
  int max_restarts = 0;  // restarts of the whole group after a failure
  /// Added to every worker's environment (e.g. OMP_WAIT_POLICY; see Note [OpenMP threads of
  /// ranks that share cores]). Not a flag: the launch command decides.
  std::vector<std::pair<std::string, std::string>> worker_env;
};

std::vector<Flag> launch_flags(LaunchOptions& o);
extern const char* const kLaunchUsage;

/// Splits `launch` args into launcher flags and the worker command (from `train` on);
/// UsageError when invalid. Returns the worker args (starting with "train").
std::vector<std::string> parse_launch_args(const std::vector<std::string>& args, LaunchOptions* opts);

/// Runs the workers (exec of `self_exe worker_args...`) to completion; returns the exit code.
int run_launcher(const LaunchOptions& opts, const std::string& self_exe,
                 const std::vector<std::string>& worker_args);

}  // namespace ddptrain
