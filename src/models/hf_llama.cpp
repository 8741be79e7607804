#include "models/hf_llama.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "models/hf_config_fields.h"
#include "util/error.h"
#include "util/json_text.h"
#include "util/strings.h"

namespace ddptrain {
namespace {

constexpr const char* kModelPrefix = "model.";
constexpr const char* kLmHead = "lm_head.weight";

void llama_unsupported(bool ok, const std::string& origin, const std::string& what) {
  hf_unsupported(ok, origin, what, "Llama");
}

// What transformers' config class assumes for a field config.json leaves out, by model_type.
struct FamilyDefaults {
  int layers, heads, kv_heads, hidden, intermediate, positions, vocab;  // kv_heads 0: = heads
  int window;    // the sliding window when one is used and sliding_window is left out
  int bos, eos;  // -1: none
};

FamilyDefaults family_defaults(const std::string& type) {
  if (type == "qwen2") return {32, 32, 32, 4096, 22016, 32768, 151936, 4096, -1, -1};
  if (type == "mistral") return {32, 32, 8, 4096, 14336, 131072, 32000, 4096, 1, 2};
  return {32, 32, 0, 4096, 11008, 2048, 32000, 0, 1, 2};  // llama
}

// The rotation's base, where transformers (5) takes it: the rope_scaling object when set and not
// empty, else rope_parameters, as a whole (the other one is not read); a base it leaves out is the
// top-level rope_theta's, else 10000. Scaled rotations (Llama 3.1's "llama3", "linear", "yarn",
// ...), a partial rotation and parameters per layer type are not computed.
double rope_theta_of(const nlohmann::json& c, const std::string& origin) {
  const double top = hf_field<double>(c, "rope_theta", origin, 10000.0);
  const auto partial = [&](const nlohmann::json& j, const std::string& where) {
    const double f = hf_field<double>(j, "partial_rotary_factor", origin, 1.0);
    llama_unsupported(f == 1.0, origin, str(where, "partial_rotary_factor ", f, " (a partial rotation)"));
  };
  partial(c, "");
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!c.contains(key) || c[key].is_null() || (c[key].is_object() && c[key].empty())) continue;
    const nlohmann::json& rope = c[key];
    llama_unsupported(rope.is_object(), origin, str(key, " ", rope.dump(), " (not an object)"));
    for (const auto& [k, v] : rope.items())
      llama_unsupported(!v.is_object(), origin, str(key, " per layer type ('", k, "')"));
    const auto type = hf_field<std::string>(rope, "rope_type", origin,
                                            hf_field<std::string>(rope, "type", origin, "default"));
    llama_unsupported(type == "default", origin,
                      str(key, ".rope_type '", type, "' (scaled rotary embeddings)"));
    partial(rope, str(key, "."));
    return hf_field<double>(rope, "rope_theta", origin, top);
  }
  return top;
}

// The sliding window some layer of this config computes (window 0: none) and the first layer
// with it: Mistral's (every layer); Qwen2's when used and some layer slides (layer_types, else
// the layers from max_window_layers on). layer_types that a first sliding layer cannot say
// (a full one after a sliding one) are refused: an export could not say them either.
struct SlidingWindow {
  int window = 0;
  int first_layer = 0;
};
SlidingWindow sliding_window_of(const nlohmann::json& c, const std::string& type, const std::string& origin,
                                int layers) {
  SlidingWindow w;
  bool used = type == "mistral";
  if (type == "qwen2" && hf_field<bool>(c, "use_sliding_window", origin, false)) {
    w.first_layer = hf_field<int>(c, "max_window_layers", origin, 28);
    if (c.contains("layer_types") && c["layer_types"].is_array()) {
      const nlohmann::json& kinds = c["layer_types"];
      w.first_layer = static_cast<int>(kinds.size());
      for (size_t i = kinds.size(); i-- > 0 && kinds[i] == "sliding_attention";)
        w.first_layer = static_cast<int>(i);
      for (size_t i = 0; i < static_cast<size_t>(w.first_layer); ++i)
        llama_unsupported(
            kinds[i] != "sliding_attention", origin,
            str("layer_types: layer ", i,
                " slides before a layer with full attention (only the layers from one on can)"));
    }
    used = w.first_layer < layers;
  }
  if (!used || hf_null(c, "sliding_window")) return {};  // null: no window (left out: the family's)
  w.window = hf_field<int>(c, "sliding_window", origin, family_defaults(type).window);
  return w;
}

// The sizes, each >= 1 and each equal to the flag the user set, if any. A sliding window shorter
// than max_position_embeddings caps the model's positions: within it the window changes nothing.
void apply_llama_sizes(const nlohmann::json& c, const std::string& type, const std::string& origin,
                       ModelOptions& o) {
  const FamilyDefaults d = family_defaults(type);
  const int heads = hf_field<int>(c, "num_attention_heads", origin, d.heads);
  const int layers = hf_field<int>(c, "num_hidden_layers", origin, d.layers);
  const SlidingWindow sliding = sliding_window_of(c, type, origin, layers);
  const int window = sliding.window;
  const int positions = hf_field<int>(c, "max_position_embeddings", origin, d.positions);
  const struct {
    int* field;
    const char* name;
    const char* key;
    int value;
  } sizes[] = {{&o.n_layer, "n_layer", "num_hidden_layers", layers},
               {&o.n_head, "n_head", "num_attention_heads", heads},
               {&o.n_kv_head, "n_kv_head", "num_key_value_heads",
                hf_null(c, "num_key_value_heads")  // null: one per query head, in every family
                    ? heads
                    : hf_field<int>(c, "num_key_value_heads", origin, d.kv_heads > 0 ? d.kv_heads : heads)},
               {&o.n_embd, "n_embd", "hidden_size", hf_field<int>(c, "hidden_size", origin, d.hidden)},
               {&o.intermediate_size, "intermediate_size", "intermediate_size",
                hf_field<int>(c, "intermediate_size", origin, d.intermediate)},
               {&o.max_positions, "max_positions", "max_position_embeddings", positions},
               {&o.vocab_size, "vocab_size", "vocab_size", hf_field<int>(c, "vocab_size", origin, d.vocab)}};
  for (const auto& s : sizes) {
    llama_unsupported(s.value >= 1, origin, str(s.key, " ", s.value, " (below 1)"));
    hf_set(s.field, s.name, s.value, 0, s.key, o);
  }
  // Carried to an export (beyond the window, transformers' model windows); a flag that says
  // another window than the config's, or one where it has none, contradicts it.
  hf_set(&o.sliding_window, "sliding_window", window, 0, "sliding_window", o);
  hf_set(&o.max_window_layers, "max_window_layers", sliding.first_layer, 0, "max_window_layers", o);
  if (o.block_size == 0)  // a shorter window is the run's
    o.block_size = window > 0 ? std::min(window, o.max_positions) : o.max_positions;
  llama_unsupported(window <= 0 || window >= o.block_size, origin,
                    str("sliding_window ", window, " is shorter than the training window ", o.block_size,
                        " (attention limited to a window; pass --block_size ", window, " or less)"));
  llama_unsupported(o.n_embd % o.n_head == 0, origin,
                    str("hidden_size ", o.n_embd, " is not a multiple of num_attention_heads ", o.n_head));
  const int head_dim = hf_field<int>(c, "head_dim", origin, o.n_embd / o.n_head);
  llama_unsupported(
      int64_t{head_dim} * o.n_head == o.n_embd, origin,
      str("head_dim ", head_dim, " (not hidden_size / num_attention_heads = ", o.n_embd / o.n_head, ")"));
}

// The token ids (hf_token_id; left out: the family's, as its config class): pad's embedding row
// gets no gradient (transformers' padding_idx); bos and eos are carried to an export's config.json.
void apply_token_ids(const nlohmann::json& c, const std::string& type, const std::string& origin,
                     ModelOptions& o) {
  const FamilyDefaults d = family_defaults(type);
  for (const auto& [field, key, fallback] :
       {std::tuple{&o.pad_token_id, "pad_token_id", -1}, std::tuple{&o.bos_token_id, "bos_token_id", d.bos},
        std::tuple{&o.eos_token_id, "eos_token_id", d.eos}})
    hf_set(field, key, hf_token_id(c, key, origin, o.vocab_size, fallback, "Llama"), -1, key, o);
  hf_set(&o.eos_token_ids, "eos_token_ids", hf_token_id_list(c, "eos_token_id", origin, "Llama"),
         std::string(), "eos_token_id", o);
}

}  // namespace

void apply_hf_llama_config(const nlohmann::json& c, const std::string& origin, ModelOptions& o) {
  const auto type = hf_field<std::string>(c, "model_type", origin, "");
  DDP_USAGE_CHECK(type == "llama" || type == "qwen2" || type == "mistral", "'", origin, "': model_type '",
                  type, "' is not of the Llama family (llama, qwen2, mistral)");
  apply_llama_sizes(c, type, origin, o);
  apply_token_ids(c, type, origin, o);
  const auto act = hf_field<std::string>(c, "hidden_act", origin, "silu");
  llama_unsupported(act == "silu" || act == "swish", origin,
                    str("hidden_act '", act, "' (the SwiGLU MLP's is silu)"));
  // Qwen2 and Mistral fix their biases in code; only Llama's config chooses them.
  if (type == "llama")
    llama_unsupported(!hf_field<bool>(c, "mlp_bias", origin, false), origin, "mlp_bias true");
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
  const AttentionBias bias = type == "qwen2" ? AttentionBias::kQkv
                             : type == "llama" && hf_field<bool>(c, "attention_bias", origin, false)
                                 ? AttentionBias::kAll
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

HfPlan llama_hf_plan(const std::vector<StoredTensor>& stored, const LlamaConfig& c,
                     const std::string& origin) {
  const auto layout = llama_layout(c);
  const std::map<std::string, std::vector<int64_t>> want(layout.begin(), layout.end());
  std::map<std::string, HfSource> got;
  HfPlan plan;
  plan.origin = origin;
  const auto stored_name = [](const std::string& name) {
    return name == kLmHead ? name : kModelPrefix + name;
  };
  for (const StoredTensor& t : stored) {
    const std::string name =
        t.name.rfind(kModelPrefix, 0) == 0 ? t.name.substr(std::string(kModelPrefix).size()) : t.name;
    if (ends_with(name, ".rotary_emb.inv_freq")) continue;  // a buffer of older files
    if (c.tie_embeddings && name == kLmHead) {
      plan.ties.push_back(
          {"embed_tokens.weight", t.name,
           "lm_head.weight differs from model.embed_tokens.weight, but the config ties them"});
      continue;
    }
    const auto it = want.find(name);
    DDP_USAGE_CHECK(it != want.end(), "'", origin, "': tensor '", t.name, "' is not a weight of this Llama (",
                    c.n_layer, " layers, attention biases ", word(c.attention_bias),
                    c.tie_embeddings ? ", tied" : ", untied", ")");
    DDP_USAGE_CHECK(at::isFloatingType(t.dtype), "'", origin, "': tensor '", t.name, "' is ", t.dtype,
                    "; weights are float32, bfloat16 or float16");
    DDP_USAGE_CHECK(t.shape == it->second, "'", origin, "': tensor '", t.name, "' has shape ",
                    at::IntArrayRef(t.shape), "; the config's sizes need ", at::IntArrayRef(it->second));
    plan_once(got, name, {t.name, t.dtype, it->second, false}, origin);
  }
  for (const auto& [name, shape] : layout) {
    DDP_USAGE_CHECK(got.count(name) != 0, "'", origin, "': tensor '", stored_name(name), "' is missing");
    plan.tensors.emplace_back(name, got[name]);
  }
  return plan;
}

NamedTensors llama_from_hf(const NamedTensors& hf, const LlamaConfig& c, const std::string& origin) {
  const TensorsInMemory source(hf);
  return read_by_plan(source, llama_hf_plan(source.tensors(), c, origin));
}

NamedTensors llama_to_hf(const NamedTensors& ours) {
  NamedTensors out;
  for (const auto& [name, t] : ours) out.emplace_back(name == kLmHead ? name : kModelPrefix + name, t);
  return out;
}

std::string hf_llama_config_json(const LlamaConfig& c, const std::string& dtype) {
  const bool qwen2 = c.attention_bias == AttentionBias::kQkv;
  const bool mistral = !qwen2 && c.sliding_window > 0;  // its window, which Llama's config cannot say
  nlohmann::json j = {{"architectures",
                       {qwen2     ? "Qwen2ForCausalLM"
                        : mistral ? "MistralForCausalLM"
                                  : "LlamaForCausalLM"}},
                      {"model_type", qwen2     ? "qwen2"
                                     : mistral ? "mistral"
                                               : "llama"},
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
  for (const auto& [key, id] :
       {std::pair{"pad_token_id", c.pad_token_id}, std::pair{"bos_token_id", c.bos_token_id},
        std::pair{"eos_token_id", c.eos_token_id}})
    j[key] = id >= 0 ? nlohmann::json(id) : nlohmann::json();
  if (c.eos_token_ids.size() > 1) j["eos_token_id"] = c.eos_token_ids;  // generate() stops at each
  if (qwen2) {
    j["use_sliding_window"] = c.sliding_window > 0;
    j["sliding_window"] = nullptr;  // none (Qwen2Config's 4096 applied regardless in some releases)
    if (c.sliding_window > 0) {
      j["sliding_window"] = c.sliding_window;
      j["max_window_layers"] = c.max_window_layers;
    }
  } else if (mistral) {
    j["head_dim"] = c.head_dim();
    j["sliding_window"] = c.sliding_window;
  } else {
    j["head_dim"] = c.head_dim();
    j["attention_bias"] = c.attention_bias == AttentionBias::kAll;
    j["mlp_bias"] = false;
  }
  return json_text(j, 2) + "\n";
}

}  // namespace ddptrain
