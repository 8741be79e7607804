// `ddptrain launch`: validates the worker flags once, then runs the workers.
#include <algorithm>
#include <cstdio>
#include <thread>

#include "config/train_config.h"
#include "launch/launcher.h"
#include "tools/commands.h"
#include "util/env.h"
#include "util/error.h"
#include "util/thread_policy.h"

namespace ddptrain {

int cmd_launch(const std::vector<std::string>& args, const std::string& self_exe) {
  LaunchOptions opts;
  // --help among the launch flags is launch's; after them it belongs to the worker command.
  const size_t split = launch_flags_end(args);
  if (args.empty() || wants_help({args.begin(), args.begin() + static_cast<long>(split)})) {
    std::printf("%s", flags_help(launch_flags(opts), kLaunchUsage).c_str());
    return args.empty() ? 2 : 0;
  }
  auto worker_args = parse_launch_args(args, &opts);
  // The worker's help is printed once, here, not by N workers.
  if (wants_help(worker_args) && worker_args[0] == "train")
    return cmd_train({worker_args.begin() + 1, worker_args.end()});
  DDP_USAGE_CHECK(
      worker_args[0] != "eval" || opts.stall_s == 0,
      "--stall_s watches the flight recorders of training workers; eval keeps none: drop --stall_s");
  // Validate the worker flags here too: a usage error is reported once, not by N workers.
  if (worker_args[0] == "train") {
    const TrainConfig cfg = resolve_train_config({worker_args.begin() + 1, worker_args.end()});
    opts.first_resume_from = cfg.trainer.checkpoint.resume_from;  // --config's too
    opts.worker_saves = !cfg.trainer.checkpoint.dir.empty();
    // Note [Stall seen by the launcher]: the workers' flight recorders report their waits, in
    // the checkpoint folder; without them the watch would see nothing, and say nothing.
    DDP_USAGE_CHECK(opts.stall_s == 0 || (cfg.dist.flight_recorder > 0 && opts.worker_saves), "--stall_s ",
                    opts.stall_s, " watches the workers' flight recorders, which ",
                    cfg.dist.flight_recorder == 0 ? "--flight_recorder 0 turns off"
                                                  : "need a --checkpoint_dir (it is '')",
                    ": drop --stall_s, or give the workers a flight recorder and a checkpoint folder");
    if (opts.stall_s >= cfg.dist.dist_timeout_s)  // Note [Stall seen by the launcher]
      std::fprintf(stderr,
                   "launch: --stall_s %g >= --dist_timeout_s %d: the collective timeout ends a hang first\n",
                   opts.stall_s, cfg.dist.dist_timeout_s);
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    const int threads = threads_per_rank(cfg.program.threads, cores, opts.nproc_per_node);
    // See Note [OpenMP threads of ranks that share cores].
    if (threads_outnumber_cores(opts.nproc_per_node, threads, cores) && !env::get("OMP_WAIT_POLICY")) {
      opts.worker_env.emplace_back("OMP_WAIT_POLICY", "PASSIVE");
      std::fprintf(
          stderr,
          "launch: %d workers x %d intra-op threads > %d cores: OMP_WAIT_POLICY=PASSIVE for the workers "
          "(spinning OpenMP threads would take each other's cores; set OMP_WAIT_POLICY to choose)\n",
          opts.nproc_per_node, threads, cores);
    }
  } else if (opts.nproc_per_node > 1 && !env::get("OMP_NUM_THREADS")) {
    // Another program (a library user's): LibTorch would start a thread per core in each of
    // the workers. As torchrun (which sets 1), but with the cores shared among them.
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    const int threads = threads_per_rank(0, cores, opts.nproc_per_node);
    opts.worker_env.emplace_back("OMP_NUM_THREADS", std::to_string(threads));
    std::fprintf(
        stderr,
        "launch: OMP_NUM_THREADS=%d for each of the %d workers (%d cores shared; set OMP_NUM_THREADS "
        "to choose)\n",
        threads, opts.nproc_per_node, cores);
  }
  return run_launcher(opts, self_exe, worker_args);
}

}  // namespace ddptrain
