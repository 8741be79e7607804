#include "models/hf_gpt2.h"

#include <cmath>
#include <map>
#include <set>

#include <ATen/CPUGeneratorImpl.h>

#include "models/hf_config_fields.h"
#include "util/error.h"
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

// Gpt's names, shapes and order, from a Gpt built for the purpose: its initialisation draws
// from the default generator, whose state is put back (the program's seeded draws go on as if
// this had not run).
NamedTensors model_layout(const GptConfig& c) {
  // Not under the generator's mutex: Gpt's initialisation takes it for each draw.
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  const at::Tensor state = gen.get_state();
  NamedTensors layout = state_dict(*Gpt(c));
  gen.set_state(state);
  return layout;
}

}  // namespace

void apply_hf_gpt2_config(const nlohmann::json& c, const std::string& origin, ModelOptions& o) {
  const auto type = hf_field<std::string>(c, "model_type", origin, "");
  DDP_USAGE_CHECK(type == "gpt2", "'", origin, "': model_type '", type,
                  "' is not a model ddptrain reads from a Hugging Face folder (it reads gpt2)");
  const int n_embd = hf_field<int>(c, "n_embd", origin, 768);
  const std::map<const char*, std::pair<int*, int>> sizes = {
      {"n_layer", {&o.n_layer, hf_field<int>(c, "n_layer", origin, 12)}},
      {"n_head", {&o.n_head, hf_field<int>(c, "n_head", origin, 12)}},
      {"n_embd", {&o.n_embd, n_embd}},
      {"block_size", {&o.block_size, hf_field<int>(c, "n_positions", origin, 1024)}},
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

NamedTensors gpt_from_hf(const NamedTensors& hf, const GptConfig& c, const std::string& origin) {
  const NamedTensors model_state = model_layout(c);
  std::map<std::string, at::Tensor> want(model_state.begin(), model_state.end());
  std::map<std::string, at::Tensor> got;
  at::Tensor lm_head;
  for (const auto& [stored, t] : hf) {
    const std::string name =
        stored.rfind(kPrefix, 0) == 0 ? stored.substr(std::string(kPrefix).size()) : stored;
    if (is_mask_buffer(name)) continue;
    if (name == "lm_head.weight") {
      lm_head = t;
      continue;
    }
    DDP_USAGE_CHECK(want.count(name) != 0, "'", origin, "': tensor '", stored,
                    "' is not a weight of GPT-2 with these sizes (", c.n_layer, " layers)");
    at::Tensor v = (is_conv1d(name) && t.dim() == 2 ? t.t() : t).to(at::kFloat).contiguous();
    DDP_USAGE_CHECK(v.sizes() == want[name].sizes(), "'", origin, "': tensor '", stored, "' has shape ",
                    t.sizes(), " (", t.scalar_type(), "); the config's sizes need ",
                    is_conv1d(name) ? want[name].t().sizes() : want[name].sizes());
    got[name] = v;
  }
  NamedTensors out;
  for (const auto& [name, t] : model_state) {
    DDP_USAGE_CHECK(got.count(name) != 0, "'", origin, "': tensor '", kPrefix, name, "' is missing");
    out.emplace_back(name, got[name]);
  }
  if (lm_head.defined())
    DDP_USAGE_CHECK(
        lm_head.sizes() == got["wte.weight"].sizes() && lm_head.to(at::kFloat).equal(got["wte.weight"]), "'",
        origin,
        "': lm_head.weight differs from transformer.wte.weight: untied output weights, "
        "which ddptrain's GPT does not have");
  return out;
}

NamedTensors gpt_to_hf(const NamedTensors& ours) {
  NamedTensors out;
  for (const auto& [name, t] : ours)
    out.emplace_back(kPrefix + name, is_conv1d(name) ? t.t().contiguous() : t);
  return out;
}

std::string hf_gpt2_config_json(const GptConfig& c, const std::string& dtype) {
  const nlohmann::json j = {{"architectures", {"GPT2LMHeadModel"}},
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
                            {"dtype", dtype},
                            {"bos_token_id", c.vocab_size - 1},
                            {"eos_token_id", c.vocab_size - 1}};
  return j.dump(2) + "\n";
}

}  // namespace ddptrain
