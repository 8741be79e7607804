// `ddptrain inspect sampler ...`: prints a rank's indices, space separated, on one line, so
// users can debug their data order (identical to PyTorch's DistributedSampler).
// `ddptrain inspect model ...`: the layer table, parameter count and FLOPs per sample; of a
// scripted module (--model torchscript): its tensors, and its output for one sample.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "config/flag_table.h"
#include "config/train_config.h"
#include "data/datasets.h"
#include "data/distributed_sampler.h"
#include "data/loader.h"
#include "dist/flight_verdict.h"
#include "models/build_model.h"
#include "models/gpt.h"
#include "models/llama.h"
#include "models/script_model.h"
#include "obs/memory.h"
#include "tools/commands.h"
#include "train/objective_check.h"
#include "train/trainer_options.h"
#include "util/error.h"

namespace ddptrain {

namespace {

// GPT: parameters per block and in all, and the FLOPs per token of the MFU formula.
int inspect_gpt(const ModelOptions& mo) {
  Gpt model(gpt_config(mo));
  const GptConfig& c = model->config();
  std::printf("%s\n", model->describe().c_str());
  std::printf("%-22s %14s\n", "part", "params");
  std::printf("%-22s %14lld\n", "wte (tied output)", static_cast<long long>(model->wte->weight.numel()));
  std::printf("%-22s %14lld\n", "wpe", static_cast<long long>(model->wpe->weight.numel()));
  std::printf("%-22s %14lld\n", "h.* (each block)", static_cast<long long>(count_parameters(*model->h[0])));
  std::printf("parameters: %lld (N of the FLOPs, without the position embedding and the padded rows: %lld)\n",
              static_cast<long long>(count_parameters(*model)),
              static_cast<long long>(model->non_embedding_params()));
  std::printf("training FLOPs per token (6N + 12*L*H*d_head*T, T = %lld): %lld (%.4f GFLOP)\n",
              static_cast<long long>(c.block_size), static_cast<long long>(model->train_flops_per_token()),
              static_cast<double>(model->train_flops_per_token()) / 1e9);
  return 0;
}

// Llama: parameters per part and in all, and the FLOPs per token of the MFU formula.
int inspect_llama(const ModelOptions& mo) {
  Llama model(llama_config(mo));
  const LlamaConfig& c = model->config();
  std::printf("%s\n", model->describe().c_str());
  std::printf("%-22s %14s\n", "part", "params");
  std::printf("%-22s %14lld\n", c.tie_embeddings ? "embed_tokens (tied)" : "embed_tokens",
              static_cast<long long>(model->embed_tokens->weight.numel()));
  std::printf("%-22s %14lld\n", "layers.* (each)",
              static_cast<long long>(count_parameters(*model->layers[0])));
  if (!c.tie_embeddings)
    std::printf("%-22s %14lld\n", "lm_head", static_cast<long long>(model->lm_head->weight.numel()));
  std::printf("parameters: %lld (in matmuls and norms: %lld)\n",
              static_cast<long long>(count_parameters(*model)),
              static_cast<long long>(model->matmul_params()));
  std::printf("training FLOPs per token (6N + 12*L*H*d_head*T, T = %lld): %lld (%.4f GFLOP)\n",
              static_cast<long long>(c.block_size), static_cast<long long>(model->train_flops_per_token()),
              static_cast<double>(model->train_flops_per_token()) / 1e9);
  return 0;
}

constexpr long long kMaxWorld = 1 << 20;  // ranks: as the launcher's environment reads them

// Runs `f`; its errors about the fields of `d` (or of a copy of d: Note [Options named by their
// field]) named by this command's flags.
template <typename F>
auto in_flag_words_of(const std::vector<Flag>& table, const DataOptions& d, F f) {
  try {
    return f();
  } catch (const OptionError& e) {
    throw UsageError(in_flag_words(e, table, &d));
  }
}

// The input inspect_script feeds: the first sample of --dataset (of its shape: synthetic's is
// --in_channels x --image_size^2), or (T) tokens when --block_size is given without a token dataset.
at::Tensor sample_input(const ModelOptions& mo, DataOptions d) {
  if (mo.block_size > 0 && !is_token_dataset(d.dataset)) return at::zeros({1, mo.block_size}, at::kLong);
  if (d.dataset == DatasetKind::kSynthetic || d.dataset == DatasetKind::kTokens)
    d.dataset_size = std::min<long long>(d.dataset_size, 2);  // generated data: one sample is enough
  const DataSplits data = make_datasets(d, token_spec(mo));
  DDP_USAGE_CHECK(data.train->size() > 0, "--dataset ", word(d.dataset), " holds no samples");
  return data.train->get(0).input.unsqueeze(0);
}

// A scripted module: each parameter and buffer (as model.pt will name them), the count, and
// its output for one sample of the data it is to train on (sample_input).
int inspect_script(const ModelOptions& mo, const DataOptions& d) {
  ScriptModel model(mo.model_path, 0);
  std::printf("%s\n%-40s %-9s %-20s %12s\n", model.describe().c_str(), "tensor", "kind", "shape", "numel");
  auto row = [](const std::string& name, const char* kind, const at::Tensor& t) {
    std::string shape;
    for (int64_t i = 0; i < t.dim(); ++i) shape += (i ? "x" : "") + std::to_string(t.size(i));
    std::printf("%-40s %-9s %-20s %12lld\n", name.c_str(), kind, shape.empty() ? "scalar" : shape.c_str(),
                static_cast<long long>(t.numel()));
  };
  for (const auto& p : model.named_parameters()) row(p.key(), "parameter", p.value());
  for (const auto& b : model.named_buffers()) row(b.key(), "buffer", b.value());
  std::printf("parameters: %lld\n", static_cast<long long>(count_parameters(model)));
  torch::NoGradGuard no_grad;
  model.eval();
  const at::Tensor x = sample_input(mo, d);
  at::Tensor out;
  try {
    out = model.forward(x);
  } catch (const std::exception& e) {
    throw UsageError(
        ddptrain::str("--model_path='", mo.model_path, "': its forward failed on an input of shape ",
                      x.sizes(), " from --dataset ", word(d.dataset), ": ", cause_of(e.what()),
                      "; pass the --dataset it trains on (synthetic: --in_channels, --image_size; ",
                      "tokens: --block_size)"));
  }
  std::printf("output for an input of shape %s: %s\n", ddptrain::str(x.sizes()).c_str(),
              ddptrain::str(out.sizes()).c_str());
  return 0;
}

// The flags of `inspect model`, bound to the model's options, the input's and MiniResNet's width.
std::vector<Flag> inspect_model_flags(ModelOptions& mo, DataOptions& d, double& width) {
  return {
      bind_choice("model", &mo.model, model_choices(), "the model to describe"),
      bind_choice("gpt_preset", &mo.gpt_preset, gpt_preset_choices(), "the gpt and llama sizes"),
      bind_flag("n_layer", &mo.n_layer, "gpt/llama blocks (0 = the preset's)"),
      bind_flag("n_head", &mo.n_head, "gpt/llama heads (0 = the preset's)"),
      bind_flag("n_embd", &mo.n_embd, "gpt/llama width (0 = the preset's)"),
      bind_flag("block_size", &mo.block_size, "gpt/llama context length (0 = the preset's)"),
      bind_flag("vocab_size", &mo.vocab_size, "gpt/llama vocabulary (0 = the preset's)"),
      bind_flag("n_kv_head", &mo.n_kv_head, "llama: key/value heads (0 = n_head)"),
      bind_flag("intermediate_size", &mo.intermediate_size, "llama: the MLP's width (0 = 8/3 x n_embd)"),
      bind_flag("tie_embeddings", &mo.tie_embeddings, "llama: the output layer is the token embedding"),
      bind_choice("attention_bias", &mo.attention_bias, attention_bias_choices(), "llama: none, qkv or all"),
      bind_flag("model_path", &mo.model_path, "torchscript: the scripted module's file"),
      bind_flag("width", &width, "mini_resnet: channel multiplier"),
      bind_flag("image_size", &d.image_size, "input height and width"),
      bind_flag("in_channels", &d.in_channels, "input channels"),
      bind_flag("num_classes", &d.num_classes, "mini_resnet: classes"),
      bind_choice("dataset", &d.dataset, dataset_choices(),
                  "torchscript: the data whose first sample is fed"),
      bind_flag("data_dir", &d.data_dir, "torchscript: the dataset's directory (as train's)"),
      bind_flag("data_path", &d.data_path, "torchscript: the text file of --dataset text"),
  };
}

// A flag set to other than its default that the chosen model has no use for: exit 2 naming it
// (silently describing another model than the one asked for would mislead).
void reject_flags_of_other_models(ModelKind model, const std::vector<Flag>& table) {
  ModelOptions mo;
  DataOptions d;
  double width = 1.0;
  const std::vector<Flag> defaults = inspect_model_flags(mo, d, width);
  const std::vector<std::string> decoder = {"gpt_preset", "n_layer",    "n_head",
                                            "n_embd",     "block_size", "vocab_size"};
  std::vector<std::string> applies = {"model"};
  const auto add = [&](std::vector<std::string> names) {
    applies.insert(applies.end(), names.begin(), names.end());
  };
  if (model == ModelKind::kMiniResnet) add({"width", "image_size", "in_channels", "num_classes"});
  if (is_decoder_model(model)) add(decoder);
  if (model == ModelKind::kLlama) add({"n_kv_head", "intermediate_size", "tie_embeddings", "attention_bias"});
  if (model == ModelKind::kTorchscript)
    add({"model_path", "image_size", "in_channels", "dataset", "data_dir", "data_path", "block_size",
         "vocab_size"});  // num_classes: the module's output says it
  for (size_t i = 0; i < table.size(); ++i) {
    const std::string& name = table[i].name;
    if (table[i].get() == defaults[i].get() || std::count(applies.begin(), applies.end(), name) > 0) continue;
    throw UsageError(str("--", name, " does not apply to --model ", word(model), "; drop it (see ",
                         "ddptrain inspect model --help for which flags each model takes)"));
  }
}

int inspect_model(const std::vector<std::string>& args) {
  const char* usage =
      "usage: ddptrain inspect model [--width W --image_size S --in_channels C --num_classes N]\n"
      "       ddptrain inspect model --model gpt|llama [--gpt_preset P --n_layer L --n_head H --n_embd C "
      "--block_size T --vocab_size V] [llama: --n_kv_head K --intermediate_size I --tie_embeddings "
      "--attention_bias B]\n"
      "       ddptrain inspect model --model torchscript --model_path FILE [--dataset D --data_dir DIR | "
      "--image_size S --in_channels C | --block_size T]";
  double width = 1.0;
  DataOptions d;  // the input: mini_resnet's (image_size, in_channels, num_classes), a scripted module's data
  ModelOptions mo;
  const std::vector<Flag> table = inspect_model_flags(mo, d, width);
  if (wants_help(args)) {
    std::printf("%s", flags_help(table, usage).c_str());
    return 0;
  }
  auto positional = parse_flags(table, args);
  DDP_USAGE_CHECK(positional.size() == 1, usage);
  reject_flags_of_other_models(mo.model, table);
  if (is_decoder_model(mo.model)) {  // as train checks them (a negative size is not the preset's)
    DataOptions tokens;
    tokens.dataset = DatasetKind::kTokens;
    in_flag_words_of(table, d, [&] {
      mo.validate(tokens);
      return 0;
    });
  }
  if (mo.model == ModelKind::kGpt) return inspect_gpt(mo);
  if (mo.model == ModelKind::kLlama) return inspect_llama(mo);
  if (mo.model == ModelKind::kTorchscript) {
    DDP_USAGE_CHECK(!mo.model_path.empty(), "inspect model --model torchscript needs --model_path FILE");
    return in_flag_words_of(table, d, [&] {
      d.validate();
      return inspect_script(mo, d);
    });
  }
  const long long image = d.image_size_or_default(), channels = d.in_channels, classes = d.num_classes;
  DDP_USAGE_CHECK(width > 0 && width <= 64, "--width=", width, " must be in (0, 64]");
  DDP_USAGE_CHECK(image >= 4, "--image_size=", image, " must be >= 4");
  DDP_USAGE_CHECK(channels >= 1 && classes >= 1, "--in_channels and --num_classes must be >= 1");
  MiniResNet model(MiniResNetOptions{channels, classes, width});
  std::printf("%-22s %-12s %-16s %12s %14s\n", "layer", "kind", "output", "params", "fwd MFLOP");
  int64_t fwd = 0;
  for (const auto& r : model->layer_table(image, image)) {
    std::string shape;
    for (size_t i = 0; i < r.out_shape.size(); ++i) shape += (i ? "x" : "") + std::to_string(r.out_shape[i]);
    std::printf("%-22s %-12s %-16s %12lld %14.3f\n", r.name.c_str(), r.kind.c_str(), shape.c_str(),
                static_cast<long long>(r.params), static_cast<double>(r.forward_flops) / 1e6);
    fwd += r.forward_flops;
  }
  std::printf("parameters: %lld\n", static_cast<long long>(count_parameters(*model)));
  std::printf("forward FLOPs per sample: %lld (%.4f GFLOP)\n", static_cast<long long>(fwd),
              static_cast<double>(fwd) / 1e9);
  std::printf("training FLOPs per sample (3 x forward): %lld (%.4f GFLOP)\n",
              static_cast<long long>(model->train_flops_per_sample(image, image)),
              static_cast<double>(model->train_flops_per_sample(image, image)) / 1e9);
  return 0;
}

// The loader alone: how many samples per second it delivers to a trainer that takes batches
// as fast as they come (one rank's share of an epoch, as in training), for comparing with
// the trainer's consumption rate.
int inspect_loader(const std::vector<std::string>& args) {
  const char* usage =
      "usage: ddptrain inspect loader [--dataset D --data_dir DIR | --data_path FILE --block_size T] "
      "[--batch_size B --num_workers N --batches K --world_size W --augment]";
  DataOptions d;
  LoaderOptions lo;
  lo.worker_nice = 0;  // alone on the machine: no trainer to yield to
  long long batches = 100, world = 1;
  TokenSpec tokens{1024, 50257};  // GPT-2's context and vocabulary (the default below checks for it)
  std::vector<Flag> table = {
      bind_choice("dataset", &d.dataset, dataset_choices(), "the dataset, as for train"),
      bind_flag(
          "data_dir", &d.data_dir,
          "directory of the dataset's files (fashion-mnist: /usr/share/datasets/fashion-mnist unless given)"),
      bind_flag("data_path", &d.data_path,
                "text: the text file; token_shards, webdataset: the shards, a file or a glob"),
      bind_flag("block_size", &tokens.block_size, "token datasets: tokens per sample"),
      bind_flag("vocab_size", &tokens.vocab_size,
                "token datasets: the vocabulary tokens are checked against"),
      bind_flag("image_size", &d.image_size,
                "image size (0 = the dataset's: synthetic 32, image_folder and webdataset 224)"),
      bind_flag("resize_size", &d.resize_size,
                "image_folder, webdataset: the evaluation's Resize (0 = floor(image_size*8/7))"),
      bind_flag("jpeg_dct_scaling", &d.jpeg_dct_scaling,
                "image_folder, webdataset: decode JPEGs at a reduced DCT scale where the crop allows"),
      bind_flag("batch_size", &lo.batch_size, "samples per batch"),
      bind_flag("num_workers", &lo.num_workers, "loader threads (0 = in the calling thread)"),
      bind_flag("prefetch_factor", &lo.prefetch_factor, "batches each thread prepares ahead"),
      bind_flag("augment", &d.augment,
                "augment as in training (image_folder, webdataset: RandomResizedCrop and flip)"),
      bind_flag("batches", &batches, "batches to time"),
      bind_flag("world_size", &world, "ranks the epoch is split over (rank 0's share is read)"),
  };
  if (wants_help(args)) {
    std::printf("%s", flags_help(table, usage).c_str());
    return 0;
  }
  auto positional = parse_flags(table, args);
  DDP_USAGE_CHECK(positional.size() == 1, usage);
  const bool token_data = is_token_dataset(d.dataset);
  const TokenSpec gpt2{1024, 50257};
  DDP_USAGE_CHECK(
      token_data || (tokens.block_size == gpt2.block_size && tokens.vocab_size == gpt2.vocab_size),
      "--block_size and --vocab_size apply to token datasets; --dataset ", word(d.dataset),
      " holds none: drop them");
  if (!token_data) tokens = {};
  DDP_USAGE_CHECK(!token_data || (tokens.block_size > 0 && tokens.vocab_size > 0),
                  "--block_size and --vocab_size must be > 0");
  DDP_USAGE_CHECK(lo.batch_size > 0 && lo.num_workers >= 0 && batches > 0 && world > 0,
                  "--batch_size, --batches and --world_size must be > 0 and --num_workers >= 0");
  DDP_USAGE_CHECK(lo.prefetch_factor > 0, "--prefetch_factor=", lo.prefetch_factor,
                  " must be > 0 (batches each thread prepares ahead); pass e.g. --prefetch_factor 2");
  DDP_USAGE_CHECK(world <= kMaxWorld, "--world_size=", world, " must be at most ", kMaxWorld);
  keep_cpu_heap(int64_t{1024} << 20);  // as train's default (Note [CPU heap kept across steps])
  const auto opening = std::chrono::steady_clock::now();
  DataSplits data = in_flag_words_of(table, d, [&] {
    d.validate();
    return make_datasets(d, tokens, 42);
  });
  const double open_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - opening).count();
  std::unique_ptr<Dataset> ds = std::move(data.train);
  ds->set_epoch(1);
  DistributedSampler sampler({ds->size(), static_cast<int>(world), 0, true, 42, false});
  sampler.set_epoch(1);
  Loader loader(*ds, lo);
  auto indices = sampler.indices();
  const int64_t n = std::min<int64_t>(batches, loader.num_batches(static_cast<int64_t>(indices.size())));
  loader.start(indices);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t b = 0; b < n; ++b) DDP_CHECK(loader.next().has_value(), "the loader ended early");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  loader.stop();
  const double samples_per_s = static_cast<double>(n * lo.batch_size) / s;
  std::printf(
      "loader %s (%lld samples, opened in %.3f s), %d workers, batch %d: %lld batches in %.3f s: %.0f "
      "samples/s",
      word(d.dataset), static_cast<long long>(ds->size()), open_s, lo.num_workers, lo.batch_size,
      static_cast<long long>(n), s, samples_per_s);
  if (token_data) std::printf(" (%.0f tokens/s)", samples_per_s * tokens.block_size);
  if (decodes_images(d.dataset))
    std::printf(" (%.0f images/s per loader thread)", samples_per_s / std::max(1, lo.num_workers));
  std::printf("\n");
  return 0;
}

int inspect_sampler(const std::vector<std::string>& args) {
  const char* usage =
      "usage: ddptrain inspect sampler --dataset_len N --world_size W --rank R --seed S --epoch E\n"
      "                                [--no-shuffle] [--drop_last]";
  long long len = 0, world = 1, rank = 0, epoch = 0;
  uint64_t seed = LoopOptions{}.seed;  // train's --seed default
  bool shuffle = true, drop_last = false;
  std::vector<Flag> table = {
      bind_flag("dataset_len", &len, "samples in the dataset"),
      bind_flag("world_size", &world, "number of ranks"),
      bind_flag("rank", &rank, "the rank to show"),
      bind_flag("seed", &seed, "sampler seed (train's --seed)"),
      bind_flag("epoch", &epoch,
                "the epoch given to set_epoch (train's epochs count from 1; 0 is PyTorch's default)"),
      bind_flag("shuffle", &shuffle, "permute the indices"),
      bind_flag("drop_last", &drop_last,
                "the sampler's drop_last: drop the tail instead of padding (train's sampler always pads; "
                "train's --drop_last drops the loader's last partial batch)"),
  };
  if (wants_help(args)) {
    std::printf("%s", flags_help(table, usage).c_str());
    return 0;
  }
  auto positional = parse_flags(table, args);
  DDP_USAGE_CHECK(positional.size() == 1 && positional[0] == "sampler",
                  "inspect needs what to inspect: `ddptrain inspect sampler --dataset_len N ...` or "
                  "`ddptrain inspect model --width W ...`");
  DDP_USAGE_CHECK(len >= 0, "--dataset_len=", len, " must be >= 0");
  DDP_USAGE_CHECK(world >= 1 && world <= kMaxWorld, "--world_size=", world, " must be in [1, ", kMaxWorld,
                  "]");
  DDP_USAGE_CHECK(rank >= 0 && rank < world, "--rank=", rank, " must be in [0, ", world, ")");
  DDP_USAGE_CHECK(epoch >= 0, "--epoch=", epoch, " must be >= 0");
  DistributedSampler s({len, static_cast<int>(world), static_cast<int>(rank), shuffle, seed, drop_last});
  s.set_epoch(epoch);
  std::string line;
  for (int64_t i : s.indices()) {
    if (!line.empty()) line += ' ';
    line += std::to_string(i);
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

// `ddptrain inspect hang DIR`: the verdict of the flight records a failed job left in DIR
// (Note [Flight recorder]).
int inspect_hang(const std::vector<std::string>& args) {
  const char* usage =
      "usage: ddptrain inspect hang DIR\n  DIR: where the ranks wrote flight_rank<r>.json "
      "(--checkpoint_dir of `ddptrain train`)";
  if (args.size() == 2 && (args[1] == "--help" || args[1] == "-h")) {
    std::printf("%s\n", usage);
    return 0;
  }
  DDP_USAGE_CHECK(args.size() == 2, "inspect hang takes one folder; ", usage);
  int world = 0;
  const auto records = read_flight_records(args[1], world);
  // Note [An earlier start's flight records]: a start after the hang moved them.
  const std::string previous = previous_flight_dir(args[1]);
  int previous_world = 0;
  const bool moved = records.empty() && !read_flight_records(previous, previous_world).empty();
  DDP_USAGE_CHECK(
      !records.empty(), "inspect hang: no flight_rank<r>.json in '", args[1], "'",
      moved ? "; a later start moved an earlier hang's records to '" + previous +
                  "': ddptrain inspect hang " + previous
            : std::string(" (the ranks write them there when a collective fails; --flight_recorder 0 "
                          "turns that off)"));
  std::printf("%s", hang_verdict(records, world).c_str());
  return 0;
}

}  // namespace

int cmd_inspect(const std::vector<std::string>& args) {
  const std::string what = args.empty() ? "" : args[0];
  if (what == "model") return inspect_model(args);
  if (what == "hang") return inspect_hang(args);
  if (what == "loader") return inspect_loader(args);
  const bool help = what == "--help" || what == "-h";
  if (what.empty() || help || (what != "sampler" && what[0] != '-')) {  // sampler may also follow its flags
    const char* overview =
        "usage: ddptrain inspect sampler|model|loader|hang [flags]\n"
        "  sampler  a rank's sample indices, as PyTorch's DistributedSampler gives them\n"
        "  model    the layer table, parameter count and FLOPs per sample\n"
        "  loader   how many samples per second the loader alone delivers\n"
        "  hang     which rank a failed job waited for, from its flight records (inspect hang DIR)\n"
        "run `ddptrain inspect <what> --help` for its flags";
    if (what.empty() || help) {
      std::printf("%s\n", overview);
      return what.empty() ? 2 : 0;
    }
    throw UsageError("inspect: unknown target '" + what +
                     "'; use sampler, model, loader or hang (ddptrain inspect --help)");
  }
  return inspect_sampler(args);
}

}  // namespace ddptrain
