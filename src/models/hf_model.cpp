#include "models/hf_model.h"

#include "models/build_model.h"
#include "models/hf_config_fields.h"
#include "models/hf_gpt2.h"
#include "models/hf_llama.h"
#include "models/vocab_padding.h"
#include "util/error.h"

namespace ddptrain {

void apply_hf_config(const nlohmann::json& config, const std::string& origin, ModelOptions& o) {
  const auto type = hf_field<std::string>(config, "model_type", origin, "");
  const bool gpt2 = type == "gpt2", llama = type == "llama" || type == "qwen2" || type == "mistral";
  DDP_USAGE_CHECK(gpt2 || llama, "'", origin, "': model_type '", type,
                  "' is not a model ddptrain reads from a Hugging Face folder (it reads gpt2 as --model gpt; "
                  "llama, qwen2 and mistral as --model llama)");
  const ModelKind kind = gpt2 ? ModelKind::kGpt : ModelKind::kLlama;
  if (o.model == ModelOptions{}.model) o.model = kind;
  if (o.model != kind)
    throw OptionError(
        {{&o.model, "model"}, {&o.init_from_hf, "init_from_hf"}},
        str("{0}=", word(o.model), " cannot hold {1}'s model_type '", type, "': pass {0:", word(kind), "}"),
        "ModelOptions")
        .within(&o);
  if (gpt2)
    apply_hf_gpt2_config(config, origin, o);
  else
    apply_hf_llama_config(config, origin, o);
}

namespace {

// The (vocab, C) tensors a padded vocabulary pads (Note [Padded vocabulary]).
bool is_vocab_tensor(const std::string& name) {
  return name == "wte.weight" || name == "embed_tokens.weight" || name == "lm_head.weight";
}

}  // namespace

HfPlan hf_weight_plan(const std::vector<StoredTensor>& stored, const ModelOptions& o,
                      const std::string& origin) {
  ModelOptions unpadded = o;  // a Hugging Face checkpoint holds the real vocabulary's rows
  unpadded.vocab_multiple = 1;
  HfPlan plan = o.model == ModelKind::kLlama ? llama_hf_plan(stored, llama_config(unpadded), origin)
                                             : gpt_hf_plan(stored, gpt_config(unpadded), origin);
  for (auto& [name, source] : plan.tensors) source.vocab_rows = is_vocab_tensor(name);
  return plan;
}

NamedTensors model_from_hf(const NamedTensors& hf, const ModelOptions& o, const std::string& origin) {
  ModelOptions unpadded = o;  // a Hugging Face checkpoint holds the real vocabulary's rows
  unpadded.vocab_multiple = 1;
  NamedTensors out = o.model == ModelKind::kLlama ? llama_from_hf(hf, llama_config(unpadded), origin)
                                                  : gpt_from_hf(hf, gpt_config(unpadded), origin);
  const int64_t rows = padded_vocab(gpt_config(o).vocab_size, o.vocab_multiple);
  for (auto& [name, t] : out)
    if (is_vocab_tensor(name)) t = with_vocab_rows(t, rows);
  return out;
}

NamedTensors model_to_hf(const NamedTensors& ours, const ModelOptions& o) {
  const int64_t vocab = gpt_config(o).vocab_size;
  NamedTensors real;  // the padded rows dropped
  for (const auto& [name, t] : ours)
    real.emplace_back(name,
                      is_vocab_tensor(name) && t.size(0) > vocab ? t.narrow(0, 0, vocab).contiguous() : t);
  return o.model == ModelKind::kLlama ? llama_to_hf(real) : gpt_to_hf(real);
}

std::string hf_config_json(const ModelOptions& o, const std::string& dtype) {
  return o.model == ModelKind::kLlama ? hf_llama_config_json(llama_config(o), dtype)
                                      : hf_gpt2_config_json(gpt_config(o), dtype);
}

std::string hf_architecture(const ModelOptions& o) {
  if (o.model != ModelKind::kLlama) return "GPT-2";
  if (o.attention_bias == AttentionBias::kQkv) return "Qwen2";
  return o.sliding_window > 0 ? "Mistral" : "Llama";  // as hf_llama_config_json names them
}

}  // namespace ddptrain
