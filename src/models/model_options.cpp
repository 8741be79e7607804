#include "models/model_options.h"

#include "util/error.h"
#include "util/strings.h"

namespace ddptrain {
namespace {

constexpr const char* kModelOwner = "ModelOptions";

// A scripted module: its file, and for token data the sizes ddptrain cannot read from it.
void validate_script(const ModelOptions& m, const DataOptions& data) {
  if (m.model_path.empty())
    throw OptionError(
        {{&m.model, "model"}, {&m.model_path, "model_path"}},
        "{0:torchscript} needs {1:FILE} (a module saved with torch.jit.script(model).save(FILE))",
        kModelOwner);
  if (is_token_dataset(data.dataset) && !(m.block_size > 0 && m.vocab_size > 0))
    throw OptionError(
        {{&m.model, "model"}, {&m.block_size, "block_size"}, {&m.vocab_size, "vocab_size"}},
        "{0:torchscript} on token data needs the module's context length and vocabulary: pass {1} "
        "and {2}",
        kModelOwner);
  if (m.activation_checkpointing != Recompute::kNone)
    throw OptionError(
        {{&m.activation_checkpointing, "activation_checkpointing"}},
        "{0:blocks} cannot recompute a scripted module's blocks (its code is the module's); drop it",
        kModelOwner);
  check_option_non_negative(m.flops_per_sample, "flops_per_sample", "pass 0 for no MFU", kModelOwner);
  const ModelOptions defaults;
  if (m.width != defaults.width || m.dropout != defaults.dropout)
    throw OptionError({{&m.width, "width"}, {&m.dropout, "dropout"}},
                      "{0} and {1} apply to the built-in models; a scripted module is as its file defines it",
                      kModelOwner);
}

// The model the data needs: gpt and llama read tokens, the image models images.
void check_model_reads_the_data(const ModelOptions& m, const DataOptions& data) {
  const bool token_data = is_token_dataset(data.dataset), decoder = is_decoder_model(m.model);
  const std::string kind = word(data.dataset);
  const OptionField model{&m.model, "model"}, dataset{&data.dataset, "DataOptions::dataset"};
  if (decoder && !token_data)
    throw OptionError({model, dataset, {&data.data_path, "DataOptions::data_path"}},
                      str("{0:", word(m.model), "} reads tokens, not {1:", kind,
                          "}; pass {1:tokens} (synthetic), {1:text} {2:FILE} or {1:token_shards}"),
                      kModelOwner);
  if (!decoder && token_data)
    throw OptionError(
        {model, dataset},
        str("{1:", kind, "} holds token sequences; pass {0:gpt} or {0:llama} (or an image dataset for {0:",
            word(m.model), "})"),
        kModelOwner);
}

// A built-in model's sizes, and the fields of the other built-in model left at their defaults.
void validate_built_in(const ModelOptions& m) {
  for (const auto& [field, name] :
       {std::pair{&m.n_layer, "n_layer"}, std::pair{&m.n_head, "n_head"}, std::pair{&m.n_embd, "n_embd"},
        std::pair{&m.block_size, "block_size"}, std::pair{&m.vocab_size, "vocab_size"}})
    check_option_non_negative(*field, name, "pass 0 for the preset's", kModelOwner);
  if (!(m.vocab_multiple >= 1 && m.vocab_multiple <= 4096))
    throw OptionError({{&m.vocab_multiple, "vocab_multiple"}},
                      str("{0}=", m.vocab_multiple, " must be in [1, 4096]; pass 1 for none or 64 for a GPU"),
                      kModelOwner);
  if (!(m.width > 0 && m.width <= 64))
    throw OptionError({{&m.width, "width"}}, str("{0}=", m.width, " must be in (0, 64]; pass e.g. {0:1.0}"),
                      kModelOwner);
  if (!(m.dropout >= 0 && m.dropout < 1))
    throw OptionError({{&m.dropout, "dropout"}},
                      str("{0}=", m.dropout, " must be in [0, 1); pass 0 for none"), kModelOwner);
  if (m.memory_format == MemoryFormat::kChannelsLast && m.model != ModelKind::kMiniResnet)
    throw OptionError(
        {{&m.memory_format, "memory_format"}, {&m.model, "model"}},
        str("{0:channels_last} applies to image models; {1:", word(m.model), "} has no 4-d weights"),
        kModelOwner);
  const ModelOptions defaults;
  if (is_decoder_model(m.model) && m.width != defaults.width)
    throw OptionError({{&m.width, "width"},
                       {&m.model, "model"},
                       {&m.gpt_preset, "gpt_preset"},
                       {&m.n_layer, "n_layer"},
                       {&m.n_head, "n_head"},
                       {&m.n_embd, "n_embd"}},
                      str("{0}=", m.width, " applies to mini_resnet; {1:", word(m.model),
                          "} is sized by {2} or {3}/{4}/{5}"),
                      kModelOwner);
}

// llama's own fields: in range for llama, at their defaults for every other model.
void validate_llama_fields(const ModelOptions& m) {
  const ModelOptions defaults;
  const OptionField kv{&m.n_kv_head, "n_kv_head"}, inner{&m.intermediate_size, "intermediate_size"},
      positions{&m.max_positions, "max_positions"}, theta{&m.rope_theta, "rope_theta"},
      eps{&m.rms_norm_eps, "rms_norm_eps"}, tie{&m.tie_embeddings, "tie_embeddings"},
      bias{&m.attention_bias, "attention_bias"}, model{&m.model, "model"},
      pad{&m.pad_token_id, "pad_token_id"}, bos{&m.bos_token_id, "bos_token_id"},
      eos{&m.eos_token_id, "eos_token_id"}, window{&m.sliding_window, "sliding_window"},
      window_layers{&m.max_window_layers, "max_window_layers"}, all_eos{&m.eos_token_ids, "eos_token_ids"};
  // bos and eos, carried to an export's config.json, are gpt's too.
  if (m.model != ModelKind::kLlama && m.model != ModelKind::kGpt &&
      (m.bos_token_id != -1 || m.eos_token_id != -1 || !m.eos_token_ids.empty()))
    throw OptionError(
        {bos, eos, all_eos, model},
        str("{0}, {1} and {2} apply to {3:gpt} and {3:llama}; {3:", word(m.model), "} has none: drop them"),
        kModelOwner);
  if (m.model != ModelKind::kLlama) {
    if (m.n_kv_head != 0 || m.intermediate_size != 0 || m.max_positions != 0 ||
        m.rope_theta != defaults.rope_theta || m.rms_norm_eps != defaults.rms_norm_eps ||
        m.tie_embeddings != defaults.tie_embeddings || m.attention_bias != defaults.attention_bias ||
        m.pad_token_id != -1)
      throw OptionError({kv, inner, positions, theta, eps, tie, bias, pad, model},
                        str("{0}, {1}, {2}, {3}, {4}, {5}, {6} and {7} apply to {8:llama}; {8:",
                            word(m.model), "} has none: drop them"),
                        kModelOwner);
    if (m.sliding_window != 0 || m.max_window_layers != 0)
      throw OptionError({window, window_layers, model},
                        str("{0} and {1} apply to {2:llama} (a Mistral's, a Qwen2's); {2:", word(m.model),
                            "} has none: drop them"),
                        kModelOwner);
  }
  check_option_non_negative(m.sliding_window, "sliding_window", "pass 0 for none", kModelOwner);
  check_option_non_negative(m.max_window_layers, "max_window_layers", "pass 0 for every layer", kModelOwner);
  const auto listed = parse_token_ids(m.eos_token_ids);
  if (!listed)
    throw OptionError({all_eos},
                      str("{0}='", m.eos_token_ids, "' is not a comma-separated list of token ids"),
                      kModelOwner);
  if (!listed->empty() && (*listed)[0] != m.eos_token_id)
    throw OptionError({all_eos, eos},
                      str("{0}='", m.eos_token_ids, "' starts with another id than {1}=", m.eos_token_id,
                          ": pass {1} ", (*listed)[0], " (the list's first)"),
                      kModelOwner);
  if (m.sliding_window > 0 && m.attention_bias == AttentionBias::kAll)
    throw OptionError(
        {window, bias},
        "{0} is a Mistral's (no biases) or a Qwen2's ({1:qkv}): drop {0} or pass {1:none} or {1:qkv}",
        kModelOwner);
  if (m.max_window_layers > 0 && (m.sliding_window == 0 || m.attention_bias != AttentionBias::kQkv))
    throw OptionError({window_layers, window, bias},
                      "{0} is a Qwen2's (a {1} and {2:qkv}): drop {0}, or pass {1} and {2:qkv}", kModelOwner);

  for (const OptionField& id : {pad, bos, eos})
    if (*static_cast<const int*>(id.address) < -1)
      throw OptionError(
          {id}, str("{0}=", *static_cast<const int*>(id.address), " is not a token id; pass -1 for none"),
          kModelOwner);
  check_option_non_negative(m.n_kv_head, "n_kv_head", "pass 0 for n_head (no grouping)", kModelOwner);
  check_option_non_negative(m.intermediate_size, "intermediate_size", "pass 0 for 8/3 x n_embd", kModelOwner);
  check_option_non_negative(m.max_positions, "max_positions", "pass 0 for block_size", kModelOwner);
  if (!(m.rope_theta > 0 && m.rope_theta < 1e12))
    throw OptionError({theta}, str("{0}=", m.rope_theta, " must be in (0, 1e12); pass e.g. {0:10000}"),
                      kModelOwner);
  if (!(m.rms_norm_eps > 0 && m.rms_norm_eps < 1))
    throw OptionError({eps}, str("{0}=", m.rms_norm_eps, " must be in (0, 1); pass e.g. {0:1e-6}"),
                      kModelOwner);
}

}  // namespace

std::optional<std::vector<int64_t>> parse_token_ids(const std::string& ids) {
  std::vector<int64_t> out;
  if (ids.empty()) return out;
  size_t start = 0;
  for (;;) {
    const size_t end = std::min(ids.find(',', start), ids.size());
    const std::string id = ids.substr(start, end - start);
    if (id.empty() || id.size() > 18 || id.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    out.push_back(std::stoll(id));
    if (end == ids.size()) return out;
    start = end + 1;
  }
}

void ModelOptions::validate(const DataOptions& data) const {
  if (model == ModelKind::kTorchscript) {
    validate_script(*this, data);
  } else {
    if (!model_path.empty())
      throw OptionError({{&model_path, "model_path"}, {&model, "model"}}, "{0} applies to {1:torchscript}",
                        kModelOwner);
    check_model_reads_the_data(*this, data);
    validate_built_in(*this);
    if (flops_per_sample != 0)
      throw OptionError({{&flops_per_sample, "flops_per_sample"}, {&model, "model"}},
                        "{0} applies to {1:torchscript} (the built-in models count their own)", kModelOwner);
  }
  const ModelOptions defaults;
  if (model != ModelKind::kGpt && gpt_activation != defaults.gpt_activation)
    throw OptionError({{&gpt_activation, "gpt_activation"}, {&model, "model"}},
                      str("{0} applies to {1:gpt}; {1:", word(model), "} has no GELU to set: drop it"),
                      kModelOwner);
  if (model != ModelKind::kGpt && fused_linear != defaults.fused_linear)
    throw OptionError({{&fused_linear, "fused_linear"}, {&model, "model"}},
                      str("{0} applies to {1:gpt} (its Linear layers and GELU); {1:", word(model),
                          "} has none it fuses: drop it"),
                      kModelOwner);
  if (!is_decoder_model(model) && fused_norm != defaults.fused_norm)
    throw OptionError({{&fused_norm, "fused_norm"}, {&model, "model"}},
                      str("{0} applies to {1:gpt} and {1:llama} (their LayerNorms and RMSNorms); {1:",
                          word(model), "} has none to fuse: drop it"),
                      kModelOwner);
  if (!is_decoder_model(model) && vocab_multiple != defaults.vocab_multiple)
    throw OptionError(
        {{&vocab_multiple, "vocab_multiple"}, {&model, "model"}},
        str("{0} applies to {1:gpt} and {1:llama}; {1:", word(model), "} has no vocabulary: drop it"),
        kModelOwner);
  if (!is_decoder_model(model) && !init_from_hf.empty())
    throw OptionError({{&init_from_hf, "init_from_hf"}, {&model, "model"}},
                      str("{0} applies to {1:gpt} and {1:llama}; {1:", word(model),
                          "} is not read from a Hugging Face folder: drop it"),
                      kModelOwner);
  validate_llama_fields(*this);
  if (model == ModelKind::kMiniResnet && (block_size != 0 || vocab_size != 0))
    throw OptionError({{&block_size, "block_size"}, {&vocab_size, "vocab_size"}, {&model, "model"}},
                      str("{0} and {1} size the token models (gpt, llama, a scripted one); {2:mini_resnet} ",
                          "reads images: drop them"),
                      kModelOwner);
  if (!is_decoder_model(model) &&
      (gpt_preset != defaults.gpt_preset || n_layer != 0 || n_head != 0 || n_embd != 0))
    throw OptionError(
        {{&gpt_preset, "gpt_preset"},
         {&n_layer, "n_layer"},
         {&n_head, "n_head"},
         {&n_embd, "n_embd"},
         {&model, "model"},
         {&width, "width"}},
        str("{0}, {1}, {2} and {3} size {4:gpt} and {4:llama}; {4:", word(model), "}",
            model == ModelKind::kTorchscript ? " is as its file defines it" : " is sized by {5}",
            ": drop them"),
        kModelOwner);
}

}  // namespace ddptrain
