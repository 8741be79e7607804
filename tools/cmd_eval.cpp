// `ddptrain eval --checkpoint DIR [train flags]`: evaluates a saved model on the test split of
// the dataset it was trained on. The model and data flags come from the checkpoint's
// config.json; a --config file given here overrides them, and flags given here override both
// (e.g. --data_dir, --batch_size); --threads and --deterministic apply as in train. Runs as one
// process or distributed (under launch/torchrun: each test sample on exactly one rank).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "config/flag_table.h"
#include "config/run_identity.h"
#include "config/train_config.h"
#include "config/train_from_config.h"
#include "data/datasets.h"
#include "dist/dist_context.h"
#include "models/build_model.h"
#include "models/gpt.h"
#include "models/llama.h"
#include "models/vocab_padding.h"
#include "obs/logger.h"
#include "obs/metrics.h"
#include "serialize/python_pickle.h"
#include "serialize/state_dict_reader.h"
#include "tools/commands.h"
#include "train/deterministic.h"
#include "train/evaluate.h"
#include "train/objective_check.h"
#include "train/resume.h"
#include "train/same_data.h"
#include "train/training_split.h"
#include "util/error.h"

namespace ddptrain {

std::string resolve_checkpoint(const std::string& dir) {
  namespace fs = std::filesystem;
  const char* fix =
      "pass a checkpoint (e.g. ./checkpoints/epoch_0001) or a --checkpoint_dir (its newest is used)";
  DDP_USAGE_CHECK(fs::exists(dir), "--checkpoint='", dir, "' does not exist; ", fix);
  DDP_USAGE_CHECK(fs::is_directory(dir), "--checkpoint='", dir, "' is a file; ", fix);
  if (is_checkpoint_dir(dir)) return dir;
  const Logger log(0, 1);
  const auto newest = find_latest_checkpoint(dir, log, /*weights_only=*/true);  // optimizer.pt may be gone
  DDP_USAGE_CHECK(newest.has_value(), "--checkpoint='", dir,
                  "' is not a checkpoint (no manifest.json: not one, or ",
                  "its save was interrupted) and holds no valid checkpoint; ", fix);
  log.info(str("--checkpoint ", dir, " holds checkpoints: using the newest that verifies, ", *newest));
  return *newest;
}

namespace {

// The result as training reports its evaluations (val loss and perplexity for token data, test
// loss and accuracy for images), and as an "eval" record in --metrics_file when given.
void report_eval(const TrainConfig& cfg, const std::string& checkpoint, const CheckpointMeta& meta,
                 const EvalResult& r, const DistContext& ctx) {
  const bool tokens = is_token_dataset(cfg.data.dataset);
  std::string line =
      str("eval ", checkpoint, " on ", cfg.data.dataset,
          tokens ? " validation split: " : " test split: ", r.samples, tokens ? " sequences" : " samples");
  nlohmann::json rec = {{"checkpoint", checkpoint},
                        {"dataset", word(cfg.data.dataset)},
                        {"samples", r.samples},
                        {"eval_s", r.seconds},  // time_s counts from the metrics file's opening
                        {"threads", at::get_num_threads()},
                        {"deterministic_algorithms", at::globalContext().deterministicAlgorithms()}};
  // The epoch record's names: test_loss and test_acc for every model, and a language model's
  // val_loss and val_perplexity beside them.
  rec["test_loss"] = r.loss;
  if (r.accuracy >= 0) rec["test_acc"] = r.accuracy;
  if (tokens) {
    line += str(" | val loss ", fmt("%.4f", r.loss), " | val perplexity ", fmt("%.2f", std::exp(r.loss)));
    rec["val_loss"] = r.loss;
    rec["val_perplexity"] = std::exp(r.loss);
  } else {
    line += str(" | test loss ", fmt("%.4f", r.loss));
    if (r.accuracy >= 0) line += str(" | test acc ", fmt("%.4f", r.accuracy));
  }
  ctx.log().info(line);
  MetricsWriter(cfg.trainer.report.metrics_file, ctx.is_main())
      .write("eval", meta.global_step, meta.epoch, std::move(rec));
}

}  // namespace

std::vector<std::string> checkpoint_train_flags(const std::string& checkpoint) {
  nlohmann::json saved;
  try {
    saved = nlohmann::json::parse(read_file(checkpoint + "/config.json"));
  } catch (const nlohmann::json::exception& e) {
    throw Error(str("checkpoint '", checkpoint, "': config.json is not readable (", e.what(), ")"));
  }
  std::vector<std::string> flags;
  for (const auto& [key, value] : saved.items()) {
    // Where the run started and wrote to: the checkpoint holds the weights and its sizes.
    if (key == "config" || key == "resume_from" || key == "init_from" || key == "init_from_hf" ||
        key == "metrics_file" || key == "tensorboard_dir" || key == "trace_samples_dir")
      continue;
    if (value.is_boolean())
      flags.push_back((value.get<bool>() ? "--" : "--no-") + key);
    else
      flags.push_back("--" + key + "=" + (value.is_string() ? value.get<std::string>() : value.dump()));
  }
  return flags;
}

namespace {

// Whether `field` (a flag's) lies within `part` of a TrainConfig.
template <typename Part>
bool within(const void* field, const Part& part) {
  const auto* f = static_cast<const char*>(field);
  const auto* begin = reinterpret_cast<const char*>(&part);
  return f >= begin && f < begin + sizeof(part);
}

// The training flags among `given` (eval reads the model's and the data's flags, --batch_size,
// --num_workers, --metrics_file, the program's (threads, algorithms, loss) and the backend's;
// the optimizer's, the loop's, checkpoints', DDP's, precision's (evaluation runs in fp32, as
// training's evaluations), dropout (evaluation has none) and the other reports' are training's).
std::vector<std::string> training_flags(const std::set<std::string>& given) {
  TrainConfig c;
  const std::vector<Flag> table = train_flags(c);
  const std::set<const void*> read = {&c.trainer.data.batch_size, &c.trainer.data.num_workers,
                                      &c.trainer.report.metrics_file};
  const std::set<const void*> unread = {
      &c.dist.flight_recorder, &c.dist.sync_bn,       &c.program.cpu_heap_keep_mb,
      &c.program.fused_loss,   &c.data.augment,       &c.model.activation_checkpointing,
      &c.model.memory_format,  &c.model.init_from_hf, &c.model.dropout};
  std::vector<std::string> training;
  for (const std::string& name : given) {
    const Flag* flag = find_flag(table, name);
    if (flag == nullptr) continue;
    const void* f = flag->field;
    if (unread.count(f) != 0 || ((within(f, c.optimizer) || within(f, c.trainer)) && read.count(f) == 0))
      training.push_back(name);
  }
  return training;
}

// A training flag on the command line (`typed`: its flags) is exit 2, not ignored.
void refuse_training_flags(const std::set<std::string>& typed) {
  const std::vector<std::string> on_command_line = training_flags(typed);
  DDP_USAGE_CHECK(
      on_command_line.empty(), "eval does not read --", on_command_line.empty() ? "" : on_command_line[0],
      " (training's): drop it; eval takes the model's and the data's flags, --batch_size, ",
      "--num_workers, --metrics_file, --threads, --deterministic, --tf32, --loss and the backend's");
}

// A training key in a --config file (the training run's own, reused) is said once and not read.
// typed: the command line's flags; given: those and the file's keys.
void say_training_keys_of_the_config(const std::set<std::string>& typed, const std::set<std::string>& given,
                                     const Logger& log) {
  std::set<std::string> from_file;
  for (const std::string& name : given)
    if (typed.count(name) == 0) from_file.insert(name);
  std::string names;
  for (const std::string& name : training_flags(from_file)) names += (names.empty() ? "" : ", ") + name;
  if (!names.empty()) log.info("eval does not read the --config file's training keys: " + names);
}

// What of a model its forward depends on: the architecture's sizes and functions; not the
// kernels' choice, the layout, recompute, the context length, nor the token ids (padding's row
// matters to training only; the others are carried to an export).
std::string architecture(const ModelOptions& o) {
  std::ostringstream os;
  os.precision(17);
  os << word(o.model);
  if (o.model == ModelKind::kGpt) {
    const GptConfig c = gpt_config(o);
    os << ' ' << c.n_layer << ' ' << c.n_head << ' ' << c.n_embd << ' ' << c.vocab_size << ' '
       << padded_vocab(c.vocab_size, c.vocab_multiple) << ' ' << c.gelu_tanh;
  } else if (o.model == ModelKind::kLlama) {
    const LlamaConfig c = llama_config(o);
    os << ' ' << c.n_layer << ' ' << c.n_head << ' ' << c.n_kv_head << ' ' << c.n_embd << ' '
       << c.intermediate_size << ' ' << c.vocab_size << ' ' << padded_vocab(c.vocab_size, c.vocab_multiple)
       << ' ' << c.rope_theta << ' ' << c.rms_norm_eps << ' ' << c.tie_embeddings << ' '
       << static_cast<int>(c.attention_bias);
  } else if (o.model == ModelKind::kMiniResnet) {
    os << ' ' << o.width;
  }
  return os.str();
}

// Model flags given here (or in --config) that build another model than the checkpoint's
// config.json records: the weights are that model's, and a change that keeps every tensor's
// shape (--n_head, --gpt_activation, --rope_theta, --rms_norm_eps) evaluated another model
// without a word. Values that build the same model pass (--n_head 2 where the preset's is 2).
void refuse_another_model(const TrainConfig& cfg, const std::set<std::string>& given,
                          const std::string& checkpoint) {
  nlohmann::json recorded;
  try {
    recorded = nlohmann::json::parse(read_file(checkpoint + "/config.json"));
  } catch (const std::exception&) {
    return;  // load_state_dict names what does not fit
  }
  if (!recorded.is_object() || !recorded.contains("model")) return;  // a library program's: no flags
  TrainConfig now = cfg, base = cfg;
  const nlohmann::json values = flags_to_json(train_flags(now));
  const std::vector<Flag> table = train_flags(base);
  std::string changed;
  for (const std::string& name : given) {
    const Flag* flag = find_flag(table, name);
    if (flag == nullptr || !within(flag->field, base.model) || !recorded.contains(name) ||
        recorded[name] == values.value(name, nlohmann::json()))
      continue;
    const nlohmann::json& v = recorded[name];
    flag->set(v.is_string()    ? v.get<std::string>()
              : v.is_boolean() ? (v.get<bool>() ? "true" : "false")
                               : v.dump());
    changed += str(changed.empty() ? "" : ", ", "--", name, "=", values.value(name, nlohmann::json()).dump(),
                   " (trained with ", v.dump(), ")");
  }
  if (changed.empty() || architecture(base.model) == architecture(cfg.model)) return;
  throw UsageError(str(changed, ": these build another model than checkpoint '", checkpoint,
                       "' was trained as (its config.json), and its weights are that model's; drop them"));
}

// The data eval reads, and the shape of the training split the checkpoint's model was built
// from.
struct EvalData {
  DataSplits splits;
  DatasetShape shape;
};

// The test split alone where the checkpoint recorded what its training split was; an older
// one's, and an image folder's without its class names, need the training split too.
EvalData open_eval_data(const TrainConfig& cfg, const CheckpointMeta& meta, const std::string& checkpoint,
                        const DistContext& ctx) {
  const std::optional<TrainingSplit> trained = recorded_training_split(meta);
  EvalData d;
  d.splits = open_data_on_every_rank(ctx, [&] { return datasets_from(cfg, trained ? &*trained : nullptr); });
  DDP_USAGE_CHECK(d.splits.test != nullptr, "--dataset ", cfg.data.dataset,
                  " has no test split to evaluate on");
  if (!d.splits.train) {
    ctx.log().info("the test split alone is read: the checkpoint records its training split's shape" +
                   std::string(trained->label_names.empty() ? "" : " and class names"));
    d.shape = trained->shape;
    return d;
  }
  RunIdentity classes;  // an image folder's, which the checkpoint's run recorded (Note [Run identity])
  add_data_identity(classes, *d.splits.train);
  const std::vector<std::string> differ = identity_differences(classes, meta.run, "");
  DDP_USAGE_CHECK(differ.empty(), "checkpoint '", checkpoint, "': ", differ.empty() ? "" : differ[0],
                  ": the class folders here are named otherwise than those it was trained on, so its ",
                  "labels would mean other classes; evaluate it on the data it was trained on (--data_dir)");
  // The training split's, as the checkpoint's run built its model (a test split without one
  // class says one class fewer: another head, refused as "other flags").
  d.shape = d.splits.train->shape();
  return d;
}

}  // namespace

int cmd_eval(const std::vector<std::string>& args) {
  const char* usage = "usage: ddptrain eval --checkpoint DIR [--data_dir D --batch_size B ...]";
  std::string checkpoint;
  std::vector<std::string> overrides;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      TrainConfig defaults;
      const std::string text =
          str(usage,
              "\nEvaluates a checkpoint (or the newest in a --checkpoint_dir) on its dataset's test split, "
              "with the flags it was trained with; a --config file given here overrides them, and flags "
              "given here override both: the model's and the data's (e.g. --data_dir on another machine), "
              "--batch_size, --num_workers, --metrics_file, --threads, --deterministic, --tf32, --loss and "
              "the backend's. The others below are training's: exit 2 here. The train flags:");
      std::printf("%s", flags_help(train_flags(defaults), text).c_str());
      return 0;
    }
    if (args[i] == "--checkpoint" && i + 1 < args.size()) {
      checkpoint = args[++i];
    } else if (args[i].rfind("--checkpoint=", 0) == 0) {
      checkpoint = args[i].substr(13);
    } else {
      overrides.push_back(args[i]);
    }
  }
  DDP_USAGE_CHECK(!checkpoint.empty(), "--checkpoint DIR is required; ", usage);
  const std::set<std::string> typed = flags_given(overrides, /*with_config=*/false);
  refuse_training_flags(typed);
  const std::set<std::string> given = flags_given(overrides);
  const std::string named = checkpoint;
  checkpoint = resolve_checkpoint(checkpoint);
  const CheckpointMeta meta = verify_checkpoint_weights(checkpoint);  // manifest and checksums first
  // The training flags the checkpoint was written with, then a --config file given here, then
  // the flags given here.
  TrainConfig cfg = resolve_train_config(overrides, checkpoint_train_flags(checkpoint));
  refuse_another_model(cfg, given, checkpoint);
  if (cfg.program.deterministic) use_deterministic_algorithms();       // before any CUDA work, as train
  if (cfg.program.tf32) at::globalContext().setAllowTF32CuBLAS(true);  // process-wide: the program's
  const bool path_given = std::any_of(overrides.begin(), overrides.end(),
                                      [](const std::string& a) { return a.rfind("--model_path", 0) == 0; });
  DDP_USAGE_CHECK(
      cfg.model.model != ModelKind::kTorchscript || path_given ||
          std::filesystem::is_regular_file(cfg.model.model_path),
      "checkpoint '", checkpoint, "' was trained from the scripted module '", cfg.model.model_path,
      "' (its config.json's model_path), which is not a file here: the checkpoint holds the weights, ",
      "not the module's code; pass --model_path PATH with the same module's file");
  DistContext ctx(read_env_contract(), dist_options(cfg.dist));
  say_training_keys_of_the_config(typed, given, ctx.log());
  // Each rank chose "the newest" in a folder on its own: a save between two listings would have
  // them evaluate different models and sum their losses (Note [One checkpoint for every rank]).
  check_ranks_chose_the_same(ctx, checkpoint, named, "--checkpoint");
  set_intra_op_threads(cfg, ctx);
  const EvalData data = open_eval_data(cfg, meta, checkpoint, ctx);
  std::shared_ptr<Model> model;
  try {
    model = build_model(cfg.model, data.shape);
  } catch (const OptionError& e) {
    throw UsageError(in_train_flag_words(e, cfg));
  }
  const std::string model_pt = checkpoint + "/model.pt";
  const auto weights = unpickle_tensors(read_file(model_pt), model_pt);
  try {
    load_state_dict(*model, weights, model_pt);
  } catch (const Error& e) {  // the flags given here build another model than the checkpoint's
    const std::vector<std::string> recorded = checkpoint_train_flags(checkpoint);
    const bool by_train = std::any_of(recorded.begin(), recorded.end(),
                                      [](const std::string& f) { return f.rfind("--model=", 0) == 0; });
    throw UsageError(str(e.what(),
                         "; eval builds the model from the checkpoint's config.json and the flags given ",
                         by_train ? "here: drop the flags that change the model"
                                  : "here, and this config.json records no train flags (a library program's "
                                    "checkpoint): give the flags that build its model (--model, its sizes, "
                                    "--dataset)"));
  }
  model->to(ctx.device());
  const EvalResult r =
      evaluate(model, *data.splits.test, {cfg.trainer.data.batch_size, cfg.trainer.data.num_workers, {}}, ctx,
               objective_for(cfg.program.loss));
  for (const auto& why : data.splits.test->take_skipped())  // as training's evaluation says them
    ctx.log().warn("skipped an evaluation sample that does not read: " + why);
  report_eval(cfg, checkpoint, meta, r, ctx);
  return 0;
}

}  // namespace ddptrain
