#include "models/hf_gpt2.h"

#include <cmath>
#include <map>
#include <set>

#include "models/hf_config_fields.h"
#include "util/error.h"
#include "util/json_text.h"
#include "util/strings.h"

namespace ddptrain {
namespace {

constexpr const char* kPrefix = "transformer.";

bool is_conv1d(const std::string& name) {
  for (const char* s :
       {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"})
    if (ends_with(name, s)) return true;
  return false;
}

// The causal-mask buffers of older files: not weights.
bool is_mask_buffer(const std::string& name) {
  return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias");
}

void unsupported(bool ok, const std::string& origin, const std::string& what) {
  hf_unsupported(ok, origin, what, "GPT");
}

}  // namespace

std::vector<std::pair<std::string, std::vector<int64_t>>> gpt_layout(const GptConfig& c) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  const int64_t C = c.n_embd;
  out.push_back({"wte.weight", {c.vocab_size, C}});
  out.push_back({"wpe.weight", {c.block_size, C}});
  const auto norm = [&](const std::string& name) {
    out.push_back({name + ".weight", {C}});
    out.push_back({name + ".bias", {C}});
  };
  const auto linear = [&](const std::string& name, int64_t in, int64_t outs) {
    out.push_back({name + ".weight", {outs, in}});
    out.push_back({name + ".bias", {outs}});
  };
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string h = str("h.", i, ".");
    norm(h + "ln_1");
    linear(h + "attn.c_attn", C, 3 * C);
    linear(h + "attn.c_proj", C, C);
    norm(h + "ln_2");
    linear(h + "mlp.c_fc", C, 4 * C);
    linear(h + "mlp.c_proj", 4 * C, C);
  }
  norm("ln_f");
  return out;
}

void apply_hf_gpt2_config(const nlohmann::json& c, const std::string& origin, ModelOptions& o) {
  const auto type = hf_field<std::string>(c, "model_type", origin, "");
  DDP_USAGE_CHECK(type == "gpt2", "'", origin, "': model_type '", type,
                  "' is not a model ddptrain reads from a Hugging Face folder (it reads gpt2)");
  // GPT2Config's attribute_map: a config may name a size by its common name, which then wins
  // over GPT-2's own (transformers sets the alias after the field).
  const auto size = [&](const char* key, const char* alias, int fallback) {
    return c.contains(alias) && !c[alias].is_null() ? hf_field<int>(c, alias, origin, fallback)
                                                    : hf_field<int>(c, key, origin, fallback);
  };
  const int n_embd = size("n_embd", "hidden_size", 768);
  const std::map<const char*, std::pair<int*, int>> sizes = {
      {"n_layer", {&o.n_layer, size("n_layer", "num_hidden_layers", 12)}},
      {"n_head", {&o.n_head, size("n_head", "num_attention_heads", 12)}},
      {"n_embd", {&o.n_embd, n_embd}},
      {"block_size", {&o.block_size, size("n_positions", "max_position_embeddings", 1024)}},
      {"vocab_size", {&o.vocab_size, hf_field<int>(c, "vocab_size", origin, 50257)}}};
  for (const auto& [name, fv] : sizes) {
    auto [f, v] = fv;
    unsupported(v >= 1, origin,
                str(name == std::string("block_size") ? "n_positions" : name, " ", v, " (below 1)"));
    if (*f != 0 && *f != v)
      throw OptionError({{f, name}, {&o.init_from_hf, "init_from_hf"}},
                        str("{0}=", *f, " differs from the ", v, " of {1}'s config.json: drop {0}"),
                        "ModelOptions")
          .within(&o);
    *f = v;
  }
  for (const auto& [field,
                    key] :  // carried to an export (left out: GPT2Config's 50256, as transformers reads it)
       {std::pair{&o.bos_token_id, "bos_token_id"}, std::pair{&o.eos_token_id, "eos_token_id"}})
    hf_set(field, key, hf_token_id(c, key, origin, o.vocab_size, 50256, "GPT"), -1, key, o);
  hf_set(&o.eos_token_ids, "eos_token_ids", hf_token_id_list(c, "eos_token_id", origin, "GPT"), std::string(),
         "eos_token_id", o);
  const int64_t inner = hf_field<int64_t>(c, "n_inner", origin, 4 * int64_t{n_embd});
  unsupported(inner == 4 * int64_t{n_embd}, origin, str("n_inner ", inner, " is not 4 x n_embd"));
  const auto act = hf_field<std::string>(c, "activation_function", origin, "gelu_new");
  unsupported(act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu", origin,
              str("activation_function '", act, "'"));
  const GptActivation from_config = act == "gelu" ? GptActivation::kGelu : GptActivation::kGeluTanh;
  if (o.gpt_activation != ModelOptions{}.gpt_activation && o.gpt_activation != from_config)
    throw OptionError(
        {{&o.gpt_activation, "gpt_activation"}, {&o.init_from_hf, "init_from_hf"}},
        str("{0}=", word(o.gpt_activation), " differs from {1}'s activation_function '", act, "': drop {0}"),
        "ModelOptions")
        .within(&o);
  o.gpt_activation = from_config;
  const double eps = hf_field<double>(c, "layer_norm_epsilon", origin, 1e-5);
  unsupported(std::abs(eps - 1e-5) < 1e-12, origin, str("layer_norm_epsilon ", eps, " (not 1e-5)"));
  unsupported(hf_field<bool>(c, "tie_word_embeddings", origin, true), origin, "tie_word_embeddings false");
  unsupported(!hf_field<bool>(c, "add_cross_attention", origin, false), origin, "add_cross_attention true");
  unsupported(hf_field<bool>(c, "scale_attn_weights", origin, true), origin, "scale_attn_weights false");
  unsupported(!hf_field<bool>(c, "scale_attn_by_inverse_layer_idx", origin, false), origin,
              "scale_attn_by_inverse_layer_idx true");
}

HfPlan gpt_hf_plan(const std::vector<StoredTensor>& stored, const GptConfig& c, const std::string& origin) {
  const auto layout = gpt_layout(c);
  const std::map<std::string, std::vector<int64_t>> want(layout.begin(), layout.end());
  std::map<std::string, HfSource> got;
  HfPlan plan;
  plan.origin = origin;
  for (const StoredTensor& t : stored) {
    const std::string name =
        t.name.rfind(kPrefix, 0) == 0 ? t.name.substr(std::string(kPrefix).size()) : t.name;
    if (is_mask_buffer(name)) continue;
    if (name == "lm_head.weight") {
      plan.ties.push_back({"wte.weight", t.name,
                           "lm_head.weight differs from transformer.wte.weight: untied output weights, "
                           "which ddptrain's GPT does not have"});
      continue;
    }
    const auto it = want.find(name);
    DDP_USAGE_CHECK(it != want.end(), "'", origin, "': tensor '", t.name,
                    "' is not a weight of GPT-2 with these sizes (", c.n_layer, " layers)");
    const bool transpose = is_conv1d(name) && t.shape.size() == 2;
    std::vector<int64_t> ours = t.shape;
    if (transpose) std::swap(ours[0], ours[1]);
    DDP_USAGE_CHECK(at::isFloatingType(t.dtype), "'", origin, "': tensor '", t.name, "' is ", t.dtype,
                    "; weights are float32, bfloat16 or float16");
    DDP_USAGE_CHECK(ours == it->second, "'", origin, "': tensor '", t.name, "' has shape ",
                    at::IntArrayRef(t.shape), " (", t.dtype, "); the config's sizes need ",
                    is_conv1d(name)
                        ? at::IntArrayRef(std::vector<int64_t>(it->second.rbegin(), it->second.rend()))
                        : at::IntArrayRef(it->second));
    plan_once(got, name, {t.name, t.dtype, it->second, transpose}, origin);
  }
  for (const auto& [name, shape] : layout) {
    DDP_USAGE_CHECK(got.count(name) != 0, "'", origin, "': tensor '", kPrefix, name, "' is missing");
    plan.tensors.emplace_back(name, got[name]);
  }
  return plan;
}

NamedTensors gpt_from_hf(const NamedTensors& hf, const GptConfig& c, const std::string& origin) {
  const TensorsInMemory source(hf);
  return read_by_plan(source, gpt_hf_plan(source.tensors(), c, origin));
}

NamedTensors gpt_to_hf(const NamedTensors& ours) {
  NamedTensors out;
  for (const auto& [name, t] : ours)
    out.emplace_back(kPrefix + name, is_conv1d(name) ? t.t().contiguous() : t);
  return out;
}

std::string hf_gpt2_config_json(const GptConfig& c, const std::string& dtype) {
  nlohmann::json j = {{"architectures", {"GPT2LMHeadModel"}},
                      {"model_type", "gpt2"},
                      {"n_layer", c.n_layer},
                      {"n_head", c.n_head},
                      {"n_embd", c.n_embd},
                      {"n_positions", c.block_size},
                      {"n_ctx", c.block_size},
                      {"vocab_size", c.vocab_size},
                      {"n_inner", nullptr},
                      {"activation_function", c.gelu_tanh ? "gelu_new" : "gelu"},
                      {"layer_norm_epsilon", 1e-5},
                      {"resid_pdrop", c.dropout},
                      {"embd_pdrop", c.dropout},
                      {"attn_pdrop", c.dropout},
                      {"tie_word_embeddings", true},
                      {"scale_attn_weights", true},
                      {"initializer_range", 0.02},
                      {"dtype", dtype}};
  // -1 is none (a config's null, a fresh model's default): null, as for Llama (it was the
  // vocabulary's last token, which a config's null never said).
  for (const auto& [key, id] :
       {std::pair{"bos_token_id", c.bos_token_id}, std::pair{"eos_token_id", c.eos_token_id}})
    j[key] = id >= 0 ? nlohmann::json(id) : nlohmann::json();
  if (c.eos_token_ids.size() > 1) j["eos_token_id"] = c.eos_token_ids;  // generate() stops at each
  return json_text(j, 2) + "\n";
}

}  // namespace ddptrain
