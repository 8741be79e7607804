// `ddptrain train`: config -> distributed context -> train -> report.
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "config/train_config.h"
#include "dist/dist_context.h"
#include "obs/memory.h"
#include "tools/commands.h"
#include "train/resume.h"
#include "train/stop_signal.h"
#include "train/trainer.h"

namespace ddptrain {

int cmd_train(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    TrainConfig defaults;
    std::printf("%s", flags_help(train_flags(defaults), kTrainUsage).c_str());
    return 0;
  }
  // Everything the user can get wrong is checked before any rank connects to another.
  TrainConfig cfg = resolve_train_config(args);
  EnvContract env = read_env_contract();
  install_cpu_memory_accounting();  // before any tensor: peak memory per epoch (obs/memory.h)
  keep_cpu_heap(static_cast<int64_t>(cfg.run.cpu_heap_keep_mb) << 20);  // Note [CPU heap kept across steps]

  DistContext ctx(env, {cfg.dist.backend, std::chrono::seconds(cfg.dist.dist_timeout_s)});
  const Logger& log = ctx.log();

  // Leftovers of an interrupted save go first (a checkpoint moved aside by an interrupted
  // replacement comes back), so that every rank then sees the same complete checkpoints.
  if (ctx.is_main()) clean_checkpoint_leftovers(cfg.run.checkpoint_dir, log);
  ctx.barrier("start-up barrier (after cleaning checkpoint leftovers)");
  // Resolve --resume_from before anything is written: a damaged checkpoint stops the run
  // with the file and the reason, and changes nothing on disk.
  // Only this run's checkpoints: see Note [Run identity].
  cfg.run.resume_from = choose_resume_checkpoint(cfg, log);
  if (!cfg.run.resume_from.empty()) verify_resumable(cfg.run.resume_from, ctx);

  TrainConfig copy = cfg;
  const std::string config_json = flags_to_json(train_flags(copy)).dump(2) + "\n";
  log.info("config: " + flags_to_json(train_flags(copy)).dump());
  if (ctx.is_main()) {
    std::filesystem::create_directories(cfg.run.checkpoint_dir);
    write_file_atomic(cfg.run.checkpoint_dir + "/config.json", config_json);
  }

  install_stop_handlers();
  TrainResult r = train(cfg, ctx, config_json);
  if (!r.nothing_to_train.empty()) {  // said by train(); no statistics to report
    ctx.shutdown();
    return 0;
  }
  if (r.test_accuracy >= 0 && cfg.model.model == "gpt")
    log.info(str("final validation loss: ", r.test_loss, " (perplexity ", std::exp(r.test_loss), ")"));
  else if (r.test_accuracy >= 0)
    log.info(str("final test accuracy: ", r.test_accuracy, " (test loss ", r.test_loss, ")"));
  log.info(str("final train loss", r.last_epoch_part.empty() ? "" : " (" + r.last_epoch_part + ")", ": ",
               r.train_loss, " after ", r.global_step, " steps; ",
               static_cast<long long>(r.samples_per_s), " samples/s (global, training only)"));
  ctx.shutdown();
  return r.stopped_by_signal ? 128 + r.stopped_by_signal : 0;
}

}  // namespace ddptrain
