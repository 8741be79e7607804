// `ddptrain train`: config -> distributed context -> train -> report.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/folder_lock.h"
#include "config/train_config.h"
#include "config/train_from_config.h"
#include "dist/dist_context.h"
#include "obs/memory.h"
#include "tools/commands.h"
#include "train/deterministic.h"
#include "train/resume.h"
#include "train/stop_signal.h"
#include "util/env.h"
#include "util/error.h"
#include "util/thread_policy.h"

namespace ddptrain {

void set_intra_op_threads(const TrainConfig& cfg, const DistContext& ctx) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const int threads = threads_per_rank(cfg.program.threads, cores, ctx.local_world_size());
  torch::set_num_threads(threads);
  if (threads_outnumber_cores(ctx.local_world_size(), threads, cores) && !env::get("OMP_WAIT_POLICY"))
    ctx.log().warn(
        str(ctx.local_world_size(), " local ranks x ", threads, " intra-op threads > ", cores,
            " cores, and OpenMP's threads spin: set OMP_WAIT_POLICY=PASSIVE (ddptrain launch does) or "
            "lower --threads (Note [OpenMP threads of ranks that share cores])"));
}

namespace {

// What every rank must agree on before anything is cleaned or chosen, in one all-reduce: whether
// rank 0 holds the checkpoint folder's lock (Note [One run per checkpoint folder]: every rank
// stops together when it does not, none waiting in a barrier), and whether this start is a
// restart (each torchrun agent counts its own restarts, and a node that joins late counts 0:
// ranks that disagreed took different paths through the choice below, and their collectives
// parted).
struct AgreedStart {
  std::unique_ptr<CheckpointFolderLock> lock;
  int restart_count = 0;  // this rank's count, at least 1 where any rank's is
};

AgreedStart agree_on_start(const TrainConfig& cfg, const EnvContract& env, const DistContext& ctx) {
  const std::string& dir = cfg.trainer.checkpoint.dir;
  AgreedStart a;
  std::string error;
  if (ctx.is_main() && !dir.empty()) {
    try {  // a restart goes on past a lock a dead attempt's node still holds (a network filesystem)
      a.lock = std::make_unique<CheckpointFolderLock>(dir, ctx.log(), env.restart_count > 0);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  std::vector<at::Tensor> t{at::tensor({error.empty() ? 0 : 1, env.restart_count > 0 ? 1 : 0}, at::kLong)};
  ctx.all_reduce_sum(t, "the start: rank 0's lock of the checkpoint folder and restart counts");
  if (!error.empty()) throw UsageError(error);
  DDP_USAGE_CHECK(
      t[0][0].item<int64_t>() == 0, "checkpoint folder '", dir,
      "' is in use by another run, or cannot be locked (rank 0's log says which): give this run another "
      "--checkpoint_dir");
  a.restart_count = t[0][1].item<int64_t>() > 0 ? std::max(env.restart_count, 1) : 0;
  return a;
}

// Resolves --resume_from before anything is written: a damaged checkpoint stops the run with
// the file and the reason, and changes nothing on disk (Note [Checkpoints read once]). Only
// this run's checkpoints: see Note [Run identity]. A torchrun restart (its agent restarts the
// workers with the same flags) continues this run's newest checkpoint, as `ddptrain launch`
// makes its restarts do: else it went back to the first attempt's start and set the attempt's
// progress aside.
void choose_checkpoint_to_resume(TrainConfig& cfg, int restart_count, const DistContext& ctx) {
  const Logger& log = ctx.log();
  std::string& resume_from = cfg.trainer.checkpoint.resume_from;
  continue_newest_on_restart(cfg.trainer.checkpoint, restart_count, log);  // none without a dir
  cfg.trainer.checkpoint.resume_on_restart = false;  // applied here, before anything was built
  const bool chose_auto = resume_from == "auto";
  resume_from = choose_resume_from(cfg, ctx.world_size(), log);
  if (chose_auto) check_ranks_chose_the_same(ctx, resume_from, cfg.trainer.checkpoint.dir);
  cfg.trainer.checkpoint.resume_fallback.clear();  // taken into that choice
  // Note [A branch a run abandons], here and not after the load: the checkpoint was verified
  // whole, and a restart of the job (launch --max_restarts, torchrun) resumes auto, which would
  // continue the abandoned branch if the first attempt died before its load (data, model build).
  if (!chose_auto && !cfg.trainer.checkpoint.dir.empty())
    set_aside_after_resume(cfg.trainer,
                           resume_from.empty() ? -1 : read_checkpoint_meta(resume_from).global_step, ctx);
}

}  // namespace

int cmd_train(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    TrainConfig defaults;
    std::printf("%s", flags_help(train_flags(defaults), kTrainUsage).c_str());
    return 0;
  }
  // Everything the user can get wrong is checked before any rank connects to another.
  TrainConfig cfg = resolve_train_config(args);
  if (cfg.program.deterministic) use_deterministic_algorithms();       // before any CUDA work
  if (cfg.program.tf32) at::globalContext().setAllowTF32CuBLAS(true);  // process-wide: the program's
  EnvContract env = read_env_contract();
  install_cpu_memory_accounting();  // before any tensor: peak memory per epoch (obs/memory.h)
  // Note [CPU heap kept across steps]; -1: kept at stage 0, lean under ZeRO.
  if (cfg.program.cpu_heap_keep_mb < 0 && cfg.trainer.zero.stage >= 1)
    lean_cpu_heap();
  else
    keep_cpu_heap(static_cast<int64_t>(cfg.program.cpu_heap_keep_mb < 0 ? 1024 : cfg.program.cpu_heap_keep_mb)
                  << 20);

  DistOptionsResolved dist_opts{cfg.dist.backend, std::chrono::seconds(cfg.dist.dist_timeout_s)};
  dist_opts.flight_recorder = static_cast<size_t>(cfg.dist.flight_recorder);
  DistContext ctx(env, dist_opts);
  const Logger& log = ctx.log();
  if (cfg.program.deterministic)
    log.info(
        "deterministic algorithms only (--deterministic): SDPA skips cuDNN's attention, cuDNN takes "
        "deterministic algorithms, cuBLAS runs with CUBLAS_WORKSPACE_CONFIG=" +
        env::get("CUBLAS_WORKSPACE_CONFIG").value_or("?"));

  // Leftovers of an interrupted save go first (a checkpoint moved aside by an interrupted
  // replacement comes back), so that every rank then sees the same complete checkpoints.
  const bool saves = !cfg.trainer.checkpoint.dir.empty();  // --checkpoint_dir '': nothing saved (benchmarks)
  if (!saves)
    log.warn("--checkpoint_dir is empty: this run saves no checkpoint, no config.json and no flight record");
  const AgreedStart start = agree_on_start(cfg, env, ctx);  // holds the folder's lock to the end
  if (ctx.is_main() && saves) clean_checkpoint_leftovers(cfg.trainer.checkpoint.dir, log);
  ctx.barrier("start-up barrier (after cleaning checkpoint leftovers)");
  choose_checkpoint_to_resume(cfg, start.restart_count, ctx);

  TrainConfig copy = cfg;
  const std::string config_json = flags_to_json(train_flags(copy)).dump(2) + "\n";
  log.info("config: " + flags_to_json(train_flags(copy)).dump());
  if (ctx.is_main() && saves) {
    std::filesystem::create_directories(cfg.trainer.checkpoint.dir);
    for (const auto& f :
         std::filesystem::directory_iterator(cfg.trainer.checkpoint.dir))  // an earlier hang's records
      if (f.path().filename().string().rfind("flight_rank", 0) == 0) std::filesystem::remove(f.path());
    write_file_atomic(cfg.trainer.checkpoint.dir + "/config.json", config_json);
  }

  if (saves) ctx.set_flight_dir(cfg.trainer.checkpoint.dir);  // Note [Flight recorder]
  // A backend thread that throws (Gloo on a collective mismatch) ends the process through
  // std::terminate: leave the flight record first, and ask the other ranks for theirs.
  static const DistContext* flight_ctx = nullptr;
  flight_ctx = &ctx;
  std::set_terminate([] {
    try {
      if (flight_ctx) flight_ctx->dump_flight("std::terminate: an uncaught exception (a backend thread?)");
    } catch (...) {
    }
    std::abort();
  });
  install_stop_handlers();
  set_intra_op_threads(cfg, ctx);
  TrainResult r = train(cfg, ctx, config_json);
  const int code = r.stopped_by_signal ? 128 + r.stopped_by_signal : 0;
  // Nothing to train (said by train()): no statistics to report, but an evaluation the
  // checkpoint owed may have been made, or stopped (Note [Evaluation owed]).
  if (!r.nothing_to_train.empty() && !r.evaluated) {
    ctx.shutdown();
    return code;
  }
  if (r.evaluated && is_token_dataset(cfg.data.dataset))
    log.info(str("final validation loss: ", r.test_loss, " (perplexity ", std::exp(r.test_loss), ")"));
  else if (r.evaluated && r.test_accuracy < 0)  // an objective without accuracy (--loss mse)
    log.info(str("final test loss: ", r.test_loss));
  else if (r.evaluated)
    log.info(str("final test accuracy: ", r.test_accuracy, " (test loss ", r.test_loss, ")"));
  if (r.run_steps > 0)
    log.info(str("final train loss", r.last_epoch_part.empty() ? "" : " (" + r.last_epoch_part + ")", ": ",
                 r.train_loss, " after ", r.global_step, " steps; ", static_cast<long long>(r.samples_per_s),
                 " samples/s (global, training only)"));
  ctx.shutdown();
  return code;
}

}  // namespace ddptrain
