// `ddptrain export --checkpoint DIR --format pt|safetensors|hf --out PATH`: the weights of a
// verified checkpoint (or the newest in a --checkpoint_dir) for other tools. pt: the state_dict
// that Python's torch.load(weights_only=True) reads; safetensors: the Hugging Face format;
// hf: a folder that transformers' from_pretrained loads (a gpt model as GPT2LMHeadModel, a
// llama as LlamaForCausalLM or Qwen2ForCausalLM: models/hf_model.h), in --dtype, sharded
// above --max_shard_mb.
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_folder.h"
#include "config/flag_table.h"
#include "config/train_config.h"
#include "models/build_model.h"
#include "models/hf_model.h"
#include "serialize/python_pickle.h"
#include "serialize/safetensors.h"
#include "serialize/state_dict_reader.h"
#include "tools/commands.h"
#include "util/error.h"
#include "util/files.h"

namespace ddptrain {

namespace {

// --format hf: the checkpoint's GPT or Llama as a folder transformers loads.
int export_hf(const std::string& checkpoint, const std::string& out, const std::string& dtype,
              long long max_shard_mb) {
  DDP_USAGE_CHECK(dtype == "fp32" || dtype == "bf16", "--dtype='", dtype, "' must be fp32 or bf16");
  DDP_USAGE_CHECK(max_shard_mb >= 1 && max_shard_mb <= (1 << 20), "--max_shard_mb=", max_shard_mb,
                  " must be in 1..1048576 (MiB)");
  DDP_USAGE_CHECK(!std::filesystem::exists(out) || std::filesystem::is_directory(out), "--out='", out,
                  "' is a file; --format hf writes a folder (config.json, model.safetensors)");
  const TrainConfig cfg = resolve_train_config({}, checkpoint_train_flags(checkpoint));
  DDP_USAGE_CHECK(
      is_decoder_model(cfg.model.model),
      "--format hf exports a gpt model (as GPT-2) or a llama (as Llama, Qwen2 or Mistral); checkpoint '",
      checkpoint, "' holds --model ", word(cfg.model.model), ": use --format pt or safetensors");
  const std::string model_pt = checkpoint + "/model.pt";
  const NamedTensors weights = unpickle_tensors(read_file(model_pt), model_pt);
  write_hf_folder(out, hf_config_json(cfg.model, dtype == "bf16" ? "bfloat16" : "float32"),
                  model_to_hf(weights, cfg.model), dtype == "bf16" ? at::kBFloat16 : at::kFloat,
                  max_shard_mb << 20);
  std::printf("wrote %s (%s for transformers, %s, %zu tensors)\n", out.c_str(),
              hf_architecture(cfg.model).c_str(), dtype.c_str(), weights.size());
  return 0;
}

}  // namespace

int cmd_export(const std::vector<std::string>& args) {
  const char* usage =
      "usage: ddptrain export --checkpoint DIR --format pt|safetensors|hf --out PATH [--dtype fp32|bf16] "
      "[--max_shard_mb N]";
  std::string checkpoint, format = "pt", out, dtype = "fp32";
  long long max_shard_mb = 5000;
  std::vector<Flag> table = {
      bind_flag("checkpoint", &checkpoint, "a checkpoint, or a --checkpoint_dir (its newest)"),
      bind_flag(
          "format", &format,
          "pt (torch.load, weights_only), safetensors, or hf (a folder for transformers' from_pretrained: "
          "config.json and model.safetensors; --model gpt or llama)"),
      bind_flag("out", &out, "file to write (written atomically); hf: the folder"),
      bind_flag("dtype", &dtype, "hf: the tensors' dtype, fp32 or bf16"),
      bind_flag("max_shard_mb", &max_shard_mb,
                "hf: one model.safetensors up to this size (MiB), else shards of at most it and their index"),
  };
  if (wants_help(args)) {
    std::printf("%s", flags_help(table, usage).c_str());
    return 0;
  }
  auto positional = parse_flags(table, args);
  DDP_USAGE_CHECK(positional.empty(), "export takes no positional argument ('",
                  positional.empty() ? "" : positional[0], "'); ", usage);
  DDP_USAGE_CHECK(!checkpoint.empty(), "--checkpoint is required; ", usage);
  DDP_USAGE_CHECK(!out.empty(), "--out is required; ", usage);
  DDP_USAGE_CHECK(format == "pt" || format == "safetensors" || format == "hf", "--format='", format,
                  "' must be pt, safetensors or hf");
  DDP_USAGE_CHECK(format == "hf" || !std::filesystem::is_directory(out), "--out='", out,
                  "' is a folder; pass a file path (e.g. ", out, "/model.", format, ")");
  DDP_USAGE_CHECK(format == "hf" || (dtype == "fp32" && max_shard_mb == 5000),
                  "--dtype and --max_shard_mb apply to --format hf");
  for (std::filesystem::path p = std::filesystem::absolute(out).lexically_normal();
       !p.empty() && p != p.parent_path();
       p = p.parent_path())  // a checkpoint's files replaced would fail its checksums: it was lost
    DDP_USAGE_CHECK(!is_checkpoint_dir(p.string()), "--out='", out, "' is inside the checkpoint ", p.string(),
                    ": export to a file or folder of its own");
  checkpoint = resolve_checkpoint(checkpoint);
  verify_checkpoint_weights(checkpoint);  // manifest and checksums: never export damaged weights
  if (format == "hf") return export_hf(checkpoint, out, dtype, max_shard_mb);
  const std::string model_pt = checkpoint + "/model.pt";
  std::string bytes = read_file(model_pt);
  if (format == "safetensors") {
    std::map<std::string, std::string> meta{{"format", "pt"}, {"source", checkpoint}};
    // Which embedding rows are real (Note [Padded vocabulary]): the tensors keep ddptrain's shapes.
    const TrainConfig cfg = resolve_train_config({}, checkpoint_train_flags(checkpoint));
    if (is_decoder_model(cfg.model.model)) {
      meta["vocab_size"] = std::to_string(token_spec(cfg.model).vocab_size);
      meta["vocab_multiple"] = std::to_string(cfg.model.vocab_multiple);
    }
    bytes = safetensors_bytes(unpickle_tensors(bytes, model_pt), meta);
  }
  create_parent_folder(out);
  write_file_atomic(out, bytes);
  std::printf("wrote %s (%s, %zu bytes)\n", out.c_str(), format.c_str(), bytes.size());
  return 0;
}

}  // namespace ddptrain
