// `ddptrain launch`: validates the worker flags once, then runs the workers.
#include <algorithm>
#include <cstdio>

#include "config/train_config.h"
#include "launch/launcher.h"
#include "tools/commands.h"

namespace ddptrain {

int cmd_launch(const std::vector<std::string>& args, const std::string& self_exe) {
  LaunchOptions opts;
  if (args.empty() || (wants_help(args) && std::find(args.begin(), args.end(), "train") == args.end())) {
    std::printf("%s", flags_help(launch_flags(opts), kLaunchUsage).c_str());
    return args.empty() ? 2 : 0;
  }
  auto worker_args = parse_launch_args(args, &opts);
  // The worker's help is printed once, here, not by N workers.
  if (wants_help(worker_args) && worker_args[0] == "train") return cmd_train({worker_args.begin() + 1, worker_args.end()});
  // Validate the worker flags here too: a usage error is reported once, not by N workers.
  if (worker_args[0] == "train") resolve_train_config({worker_args.begin() + 1, worker_args.end()});
  return run_launcher(opts, self_exe, worker_args);
}

}  // namespace ddptrain
