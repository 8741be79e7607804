// `ddptrain train`: config -> distributed context -> train -> report.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "config/train_config.h"
#include "config/train_from_config.h"
#include "dist/dist_context.h"
#include "obs/memory.h"
#include "tools/commands.h"
#include "tools/fatal_error.h"
#include "train/deterministic.h"
#include "train/stop_record.h"
#include "train/stop_signal.h"
#include "train/vector_math_first_calls.h"
#include "util/env.h"
#include "util/error.h"
#include "util/json_text.h"
#include "util/thread_policy.h"

namespace ddptrain {

void set_intra_op_threads(const TrainConfig& cfg, const DistContext& ctx) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const int threads = threads_per_rank(cfg.program.threads, cores, ctx.local_world_size());
  torch::set_num_threads(threads);
  make_first_vector_math_calls();  // Note [The first parallel call of a vector math function]
  if (threads_outnumber_cores(ctx.local_world_size(), threads, cores) && !env::get("OMP_WAIT_POLICY"))
    ctx.log().warn(
        str(ctx.local_world_size(), " local ranks x ", threads, " intra-op threads > ", cores,
            " cores, and OpenMP's threads spin: set OMP_WAIT_POLICY=PASSIVE (ddptrain launch does) or "
            "lower --threads (Note [OpenMP threads of ranks that share cores])"));
}

namespace {

int train_in(TrainConfig& cfg, DistContext& ctx);

// The context std::terminate's handler reports through, while it lives (a backend thread that
// throws ends the process there).
const DistContext* flight_ctx = nullptr;

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

  DistOptionsResolved dist_opts = dist_options(cfg.dist);
  // Note [A rank's failure ends the job]: another rank's error is this one's, reported after it.
  dist_opts.on_peer_failure = [](const std::string& first) {
    report_fatal(1, "the job failed first on " + first + "; this rank ends too", /*secondary=*/true);
    std::_Exit(1);
  };
  DistContext ctx(env, dist_opts);
  struct ForgetContext {
    ~ForgetContext() { flight_ctx = nullptr; }
  } forget;  // before ctx ends
  try {
    return train_in(cfg, ctx);
  } catch (...) {
    // Reported here, before the others hear of it and before the backend's teardown (which may
    // take a while): torchrun's and the launcher's root cause is the earliest error file.
    const FatalError f = describe_fatal(std::current_exception());
    report_fatal(f.code, f.message, f.secondary);
    ctx.announce_failure(f.message, f.secondary);
    return f.code;
  }
}

namespace {

int train_in(TrainConfig& cfg, DistContext& ctx) {
  const Logger& log = ctx.log();
  if (cfg.program.deterministic)
    log.info(
        "deterministic algorithms only (--deterministic): SDPA skips cuDNN's attention, cuDNN takes "
        "deterministic algorithms, cuBLAS runs with CUBLAS_WORKSPACE_CONFIG=" +
        env::get("CUBLAS_WORKSPACE_CONFIG").value_or("?"));

  const bool saves = !cfg.trainer.checkpoint.dir.empty();  // --checkpoint_dir '': nothing saved (benchmarks)
  if (!saves)
    log.warn("--checkpoint_dir is empty: this run saves no checkpoint, no config.json and no flight record");
  // Before the data opens and the model is built, which can take minutes that a restart could
  // cut short: Note [A run claims its checkpoint folder]. Held to the end.
  const std::shared_ptr<CheckpointFolderClaim> claim = claim_checkpoint_folder(cfg, ctx);

  TrainConfig copy = cfg;
  const nlohmann::json flags = flags_to_json(train_flags(copy));
  const std::string config_json = json_text(flags, 2) + "\n";
  log.info("config: " + json_text(flags));
  if (ctx.is_main() && saves) {
    std::filesystem::create_directories(cfg.trainer.checkpoint.dir);
    // The folder's config.json says the newest run's flags (each checkpoint keeps its own): a
    // run refused at start (its data, the checkpoint it names) leaves the last one's.
    claim->on_run_accepted = [dir = cfg.trainer.checkpoint.dir, config_json] {
      write_file_atomic(dir + "/config.json", config_json);
    };
  }

  if (saves) ctx.set_flight_dir(cfg.trainer.checkpoint.dir);  // Note [Flight recorder]
  // A backend thread that throws (Gloo on a collective mismatch) ends the process through
  // std::terminate: leave the flight record first, and ask the other ranks for theirs.
  flight_ctx = &ctx;
  // The exception's message is the error reported (it ended by abort: a core, a bare "killed by
  // signal 6" at the launcher, and no error file for its root-cause report).
  std::set_terminate([] {
    std::string what = "an uncaught exception (a backend thread?)";
    if (const std::exception_ptr e = std::current_exception()) try {
        std::rethrow_exception(e);
      } catch (const c10::Error& x) {
        what = x.what_without_backtrace();
      } catch (const std::exception& x) {
        what = x.what();
      } catch (...) {
      }
    try {
      // A connection a peer closed: that peer's failure is the root cause, not this one.
      const bool secondary = what.find("by peer") != std::string::npos;
      if (flight_ctx) flight_ctx->dump_flight("std::terminate: " + what);
      if (flight_ctx) flight_ctx->announce_failure(what, secondary);
      report_fatal(1, "std::terminate (a backend thread?): " + what, secondary);
    } catch (...) {
    }
    std::_Exit(1);
  });
  install_stop_handlers();
  set_intra_op_threads(cfg, ctx);
  // Note [A torchrun job's restarts]: a stop asked for before the Trainer's fit (the data
  // opening, the model's build) keeps the job's marker too, however the start ends.
  struct KeepOnStop {
    CheckpointFolderClaim& claim;
    ~KeepOnStop() { claim.keep_job_marker = claim.keep_job_marker || stop_signal() != 0; }
  } keep_on_stop{*claim};
  TrainResult r = train(cfg, ctx, config_json, claim);
  const int code = stop_exit_code(r, ctx);  // Note [Agreed stop]: a stop record for the launcher
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

}  // namespace

}  // namespace ddptrain
