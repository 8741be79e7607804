#include "models/hf_llama.h"

#include <map>

#include "models/hf_config_fields.h"
#include "util/error.h"

namespace ddptrain {
namespace {

constexpr const char* kModelPrefix = "model.";
constexpr const char* kLmHead = "lm_head.weight";

void llama_unsupported(bool ok, const std::string& origin, const std::string& what) {
  hf_unsupported(ok, origin, what, "Llama");
}

bool name_ends_with(const std::string& name, const std::string& end) {
  return name.size() >= end.size() && name.compare(name.size() - end.size(), std::string::npos, end) == 0;
}

// The rotation's base: transformers 5's rope_parameters, or the older top-level rope_theta;
// scaled rotations (Llama 3.1's "llama3", "linear", "yarn", ...) are not computed.
double rope_theta_of(const nlohmann::json& c, const std::string& origin) {
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (!c.contains(key) || !c[key].is_object()) continue;
    const nlohmann::json& rope = c[key];
    const auto type = hf_field<std::string>(rope, "rope_type", origin,
                                            hf_field<std::string>(rope, "type", origin, "default"));
    llama_unsupported(type == "default", origin,
                      str(key, ".rope_type '", type, "' (scaled rotary embeddings)"));
  }
  const double top = hf_field<double>(c, "rope_theta", origin, 10000.0);
  if (c.contains("rope_parameters") && c["rope_parameters"].is_object())
    return hf_field<double>(c["rope_parameters"], "rope_theta", origin, top);
  return top;
}

// The sizes, each >= 1 and each equal to the flag the user set, if any.
void apply_llama_sizes(const nlohmann::json& c, const std::string& origin, ModelOptions& o) {
  const int heads = hf_field<int>(c, "num_attention_heads", origin, 32);  // defaults: LlamaConfig's
  const struct {
    int* field;
    const char* name;
    const char* key;
    int value;
  } sizes[] = {
      {&o.n_layer, "n_layer", "num_hidden_layers", hf_field<int>(c, "num_hidden_layers", origin, 32)},
      {&o.n_head, "n_head", "num_attention_heads", heads},
      {&o.n_kv_head, "n_kv_head", "num_key_value_heads",
       hf_field<int>(c, "num_key_value_heads", origin, heads)},
      {&o.n_embd, "n_embd", "hidden_size", hf_field<int>(c, "hidden_size", origin, 4096)},
      {&o.intermediate_size, "intermediate_size", "intermediate_size",
       hf_field<int>(c, "intermediate_size", origin, 11008)},
      {&o.max_positions, "max_positions", "max_position_embeddings",
       hf_field<int>(c, "max_position_embeddings", origin, 2048)},
      {&o.vocab_size, "vocab_size", "vocab_size", hf_field<int>(c, "vocab_size", origin, 32000)}};
  for (const auto& s : sizes) {
    llama_unsupported(s.value >= 1, origin, str(s.key, " ", s.value, " (below 1)"));
    hf_set(s.field, s.name, s.value, 0, s.key, o);
  }
  if (o.block_size == 0)
    o.block_size = o.max_positions;  // a shorter window is the run's (checked when built)
  const int head_dim = hf_field<int>(c, "head_dim", origin, o.n_embd / o.n_head);
  llama_unsupported(
      head_dim * o.n_head == o.n_embd, origin,
      str("head_dim ", head_dim, " (not hidden_size / num_attention_heads = ", o.n_embd / o.n_head, ")"));
}

// A sliding window (Mistral's, Qwen2's when used) changes nothing within a window no longer than it.
void check_sliding_window(const nlohmann::json& c, const std::string& type, const std::string& origin,
                          const ModelOptions& o) {
  const bool used =
      type == "mistral" || (type == "qwen2" && hf_field<bool>(c, "use_sliding_window", origin, false));
  const int window = used ? hf_field<int>(c, "sliding_window", origin, 0) : 0;
  llama_unsupported(window <= 0 || window >= o.block_size, origin,
                    str("sliding_window ", window, " is shorter than the training window ", o.block_size,
                        " (attention limited to a window; pass --block_size ", window, " or less)"));
}

}  // namespace

void apply_hf_llama_config(const nlohmann::json& c, const std::string& origin, ModelOptions& o) {
  const auto type = hf_field<std::string>(c, "model_type", origin, "");
  DDP_USAGE_CHECK(type == "llama" || type == "qwen2" || type == "mistral", "'", origin, "': model_type '",
                  type, "' is not of the Llama family (llama, qwen2, mistral)");
  apply_llama_sizes(c, origin, o);
  check_sliding_window(c, type, origin, o);
  const auto act = hf_field<std::string>(c, "hidden_act", origin, "silu");
  llama_unsupported(act == "silu", origin, str("hidden_act '", act, "' (the SwiGLU MLP's is silu)"));
  llama_unsupported(!hf_field<bool>(c, "mlp_bias", origin, false), origin, "mlp_bias true");
  const int tp = hf_field<int>(c, "pretraining_tp", origin, 1);
  llama_unsupported(tp <= 1, origin, str("pretraining_tp ", tp, " (a sliced output layer)"));
  const ModelOptions defaults;
  hf_set(&o.rope_theta, "rope_theta", rope_theta_of(c, origin), defaults.rope_theta, "rope_theta", o);
  hf_set(&o.rms_norm_eps, "rms_norm_eps", hf_field<double>(c, "rms_norm_eps", origin, 1e-6),
         defaults.rms_norm_eps, "rms_norm_eps", o);
  const bool tied = hf_field<bool>(c, "tie_word_embeddings", origin, false);
  if (o.tie_embeddings && !tied)
    throw OptionError({{&o.tie_embeddings, "tie_embeddings"}, {&o.init_from_hf, "init_from_hf"}},
                      "{0} contradicts tie_word_embeddings false in {1}'s config.json: drop {0}",
                      "ModelOptions")
        .within(&o);
  o.tie_embeddings = tied;
  const AttentionBias bias = type == "qwen2"                                      ? AttentionBias::kQkv
                             : hf_field<bool>(c, "attention_bias", origin, false) ? AttentionBias::kAll
                                                                                  : AttentionBias::kNone;
  if (o.attention_bias != defaults.attention_bias && o.attention_bias != bias)
    throw OptionError({{&o.attention_bias, "attention_bias"}, {&o.init_from_hf, "init_from_hf"}},
                      str("{0}=", word(o.attention_bias), " differs from {1}'s config.json (model_type '",
                          type, "': ", word(bias), "): drop {0}"),
                      "ModelOptions")
        .within(&o);
  o.attention_bias = bias;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> llama_layout(const LlamaConfig& c) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  const int64_t C = c.n_embd, q = c.n_head * c.head_dim(), kv = c.n_kv_head * c.head_dim();
  const bool qkv_bias = c.attention_bias != AttentionBias::kNone,
             o_bias = c.attention_bias == AttentionBias::kAll;
  out.push_back({"embed_tokens.weight", {c.vocab_size, C}});
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string l = str("layers.", i, ".");
    const auto linear = [&](const std::string& name, int64_t in, int64_t outs, bool bias) {
      out.push_back({l + name + ".weight", {outs, in}});
      if (bias) out.push_back({l + name + ".bias", {outs}});
    };
    linear("self_attn.q_proj", C, q, qkv_bias);
    linear("self_attn.k_proj", C, kv, qkv_bias);
    linear("self_attn.v_proj", C, kv, qkv_bias);
    linear("self_attn.o_proj", q, C, o_bias);
    linear("mlp.gate_proj", C, c.intermediate_size, false);
    linear("mlp.up_proj", C, c.intermediate_size, false);
    linear("mlp.down_proj", c.intermediate_size, C, false);
    out.push_back({l + "input_layernorm.weight", {C}});
    out.push_back({l + "post_attention_layernorm.weight", {C}});
  }
  out.push_back({"norm.weight", {C}});
  if (!c.tie_embeddings) out.push_back({kLmHead, {c.vocab_size, C}});
  return out;
}

NamedTensors llama_from_hf(const NamedTensors& hf, const LlamaConfig& c, const std::string& origin) {
  const auto layout = llama_layout(c);
  const std::map<std::string, std::vector<int64_t>> want(layout.begin(), layout.end());
  std::map<std::string, at::Tensor> got;
  at::Tensor tied_head;
  const auto stored_name = [](const std::string& name) {
    return name == kLmHead ? name : kModelPrefix + name;
  };
  for (const auto& [stored, t] : hf) {
    const std::string name =
        stored.rfind(kModelPrefix, 0) == 0 ? stored.substr(std::string(kModelPrefix).size()) : stored;
    if (name_ends_with(name, ".rotary_emb.inv_freq")) continue;  // a buffer of older files
    if (c.tie_embeddings && name == kLmHead) {
      tied_head = t;
      continue;
    }
    const auto it = want.find(name);
    DDP_USAGE_CHECK(it != want.end(), "'", origin, "': tensor '", stored, "' is not a weight of this Llama (",
                    c.n_layer, " layers, attention biases ", word(c.attention_bias),
                    c.tie_embeddings ? ", tied" : ", untied", ")");
    DDP_USAGE_CHECK(at::isFloatingType(t.scalar_type()), "'", origin, "': tensor '", stored, "' is ",
                    t.scalar_type(), "; weights are float32, bfloat16 or float16");
    DDP_USAGE_CHECK(t.sizes().vec() == it->second, "'", origin, "': tensor '", stored, "' has shape ",
                    t.sizes(), "; the config's sizes need ", at::IntArrayRef(it->second));
    got[name] = t;
  }
  NamedTensors out;
  for (const auto& [name, shape] : layout) {
    DDP_USAGE_CHECK(got.count(name) != 0, "'", origin, "': tensor '", stored_name(name), "' is missing");
    out.emplace_back(name, got[name].to(at::kFloat).contiguous());
  }
  if (tied_head.defined())
    DDP_USAGE_CHECK(
        tied_head.sizes() == out.front().second.sizes() && tied_head.to(at::kFloat).equal(out.front().second),
        "'", origin, "': lm_head.weight differs from model.embed_tokens.weight, but the config ties them");
  return out;
}

NamedTensors llama_to_hf(const NamedTensors& ours) {
  NamedTensors out;
  for (const auto& [name, t] : ours) out.emplace_back(name == kLmHead ? name : kModelPrefix + name, t);
  return out;
}

std::string hf_llama_config_json(const LlamaConfig& c, const std::string& dtype) {
  const bool qwen2 = c.attention_bias == AttentionBias::kQkv;
  nlohmann::json j = {{"architectures", {qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
                      {"model_type", qwen2 ? "qwen2" : "llama"},
                      {"num_hidden_layers", c.n_layer},
                      {"num_attention_heads", c.n_head},
                      {"num_key_value_heads", c.n_kv_head},
                      {"hidden_size", c.n_embd},
                      {"intermediate_size", c.intermediate_size},
                      {"max_position_embeddings", c.max_positions},
                      {"vocab_size", c.vocab_size},
                      {"hidden_act", "silu"},
                      {"rms_norm_eps", c.rms_norm_eps},
                      {"rope_theta", c.rope_theta},
                      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", c.rope_theta}}},
                      {"tie_word_embeddings", c.tie_embeddings},
                      {"attention_dropout", c.dropout},
                      {"initializer_range", 0.02},
                      {"dtype", dtype}};
  if (qwen2) {
    j["use_sliding_window"] = false;
  } else {
    j["head_dim"] = c.head_dim();
    j["attention_bias"] = c.attention_bias == AttentionBias::kAll;
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
  }
  return j.dump(2) + "\n";
}

}  // namespace ddptrain
