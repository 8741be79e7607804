#include "models/llama.h"

#include <torch/nn/init.h>

#include "kernels/fused_layer_norm.h"
#include "kernels/fused_rotary.h"
#include "kernels/fused_swiglu.h"
#include "models/layer_norm.h"
#include "models/linear.h"
#include "models/vocab_padding.h"
#include "util/error.h"
#include "util/torch_compat.h"

namespace ddptrain {

int64_t default_intermediate_size(int64_t n_embd) { return (8 * n_embd / 3 + 63) / 64 * 64; }

namespace {

torch::nn::Linear llama_linear(int64_t in, int64_t out, bool bias) {
  torch::nn::Linear l(torch::nn::LinearOptions(in, out).bias(bias));
  torch::NoGradGuard no_grad;
  torch::nn::init::normal_(l->weight, 0.0, 0.02);
  if (bias) torch::nn::init::zeros_(l->bias);
  return l;
}

}  // namespace

LlamaRmsNormImpl::LlamaRmsNormImpl(int64_t dim, double eps_, FusedNorm fused_) : eps(eps_), fused(fused_) {
  weight = register_parameter("weight", at::ones({dim}));
}

at::Tensor LlamaRmsNormImpl::forward(const at::Tensor& x) {
  if (const auto out = fused_norm_output(x, fused)) return rms_norm_to(x, weight, eps, *out);
  return rms_norm_ops(x, weight, eps);
}

std::pair<at::Tensor, at::Tensor> LlamaRmsNormImpl::add_forward(const at::Tensor& x,
                                                                const at::Tensor& branch) {
  if (!branch.defined()) return {x, forward(x)};
  if (const auto out = fused_norm_output(x, fused)) return add_rms_norm_to(x, branch, weight, eps, *out);
  const at::Tensor h = x + branch;
  return {h, forward(h)};
}

at::Tensor rotary_inv_freq(int64_t head_dim, double theta) {
  // As transformers computes it: theta^(2i/d) in float32, its reciprocal.
  return 1.0 / at::pow(theta, at::arange(0, head_dim, 2, at::kLong).to(at::kFloat) / head_dim);
}

std::pair<at::Tensor, at::Tensor> rotary_cos_sin(int64_t T, const at::Tensor& inv_freq) {
  const at::Tensor freqs = at::outer(at::arange(T, inv_freq.options()), inv_freq);  // position x frequency
  const at::Tensor emb = at::cat({freqs, freqs}, -1);
  return {emb.cos(), emb.sin()};
}

LlamaAttentionImpl::LlamaAttentionImpl(const LlamaConfig& c)
    : n_head(c.n_head), n_kv_head(c.n_kv_head), head_dim(c.head_dim()), dropout(c.dropout) {
  const bool qkv_bias = c.attention_bias != AttentionBias::kNone;
  q_proj = register_module("q_proj", llama_linear(c.n_embd, n_head * head_dim, qkv_bias));
  k_proj = register_module("k_proj", llama_linear(c.n_embd, n_kv_head * head_dim, qkv_bias));
  v_proj = register_module("v_proj", llama_linear(c.n_embd, n_kv_head * head_dim, qkv_bias));
  o_proj = register_module(
      "o_proj", llama_linear(n_head * head_dim, c.n_embd, c.attention_bias == AttentionBias::kAll));
}

at::Tensor LlamaAttentionImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t B = x.size(0), T = x.size(1);
  auto heads = [&](const at::Tensor& t, int64_t n) { return t.view({B, T, n, head_dim}).transpose(1, 2); };
  const std::vector<at::Tensor> qkv =  // one GEMM (Note [Linear through ATen])
      linear_stacked({q_proj, k_proj, v_proj}, x)
          .split_with_sizes({n_head * head_dim, n_kv_head * head_dim, n_kv_head * head_dim}, -1);
  at::Tensor q = heads(qkv[0], n_head), k = heads(qkv[1], n_kv_head), v = heads(qkv[2], n_kv_head);
  q = rotary(q, cos, sin);  // Note [Rotary in one pass]
  k = rotary(k, cos, sin);
  // Each key/value head serves n_head / n_kv_head consecutive query heads, inside SDPA.
  const at::Tensor y = compat::causal_attention(q, k, v, is_training() ? dropout : 0.0);
  return linear(o_proj, y.transpose(1, 2).reshape({B, T, n_head * head_dim}));
}

LlamaMlpImpl::LlamaMlpImpl(const LlamaConfig& c) {
  gate_proj = register_module("gate_proj", llama_linear(c.n_embd, c.intermediate_size, false));
  up_proj = register_module("up_proj", llama_linear(c.n_embd, c.intermediate_size, false));
  down_proj = register_module("down_proj", llama_linear(c.intermediate_size, c.n_embd, false));
}

at::Tensor LlamaMlpImpl::forward(const at::Tensor& x) {
  // Note [SwiGLU in one pass]: one kernel each way on CUDA, ATen's ops elsewhere.
  return linear(down_proj, swiglu(linear_stacked({gate_proj, up_proj}, x)));
}

LlamaLayerImpl::LlamaLayerImpl(const LlamaConfig& c) {
  self_attn = register_module("self_attn", LlamaAttention(c));
  mlp = register_module("mlp", LlamaMlp(c));
  input_layernorm = register_module("input_layernorm", LlamaRmsNorm(c.n_embd, c.rms_norm_eps, c.fused_norm));
  post_attention_layernorm =
      register_module("post_attention_layernorm", LlamaRmsNorm(c.n_embd, c.rms_norm_eps, c.fused_norm));
}

Residual LlamaLayerImpl::forward(Residual in, const at::Tensor& cos, const at::Tensor& sin) {
  // Each residual add joins the next norm's passes: the previous layer's joins the input norm's,
  // the attention's the second norm's (Note [Residual add in the next norm]).
  const auto [x, normed_1] = input_layernorm->add_forward(in.x, in.branch);
  in = {};  // the previous branch is not kept through this layer
  const auto [h, normed_2] = post_attention_layernorm->add_forward(x, self_attn->forward(normed_1, cos, sin));
  return {h, mlp(normed_2)};
}

at::Tensor LlamaLayerImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return forward(Residual{x, {}}, cos, sin).sum();
}

LlamaImpl::LlamaImpl(const LlamaConfig& c, UnitSink* sink) : Model(sink), cfg_(c) {
  DDP_USAGE_CHECK(c.n_layer >= 1 && c.n_head >= 1 && c.n_kv_head >= 1 && c.n_embd >= 1 &&
                      c.intermediate_size >= 1 && c.block_size >= 1 && c.vocab_size >= 1,
                  "Llama sizes must be >= 1 (n_layer ", c.n_layer, ", n_head ", c.n_head, ", n_kv_head ",
                  c.n_kv_head, ", n_embd ", c.n_embd, ", intermediate_size ", c.intermediate_size,
                  ", block_size ", c.block_size, ", vocab_size ", c.vocab_size, ")");
  DDP_USAGE_CHECK(c.n_embd % c.n_head == 0 && c.head_dim() % 2 == 0, "LlamaConfig::n_embd=", c.n_embd,
                  " must be n_head=", c.n_head, " times an even head size, e.g. ", c.n_head * 64);
  DDP_USAGE_CHECK(c.vocab_multiple >= 1, "LlamaConfig::vocab_multiple=", c.vocab_multiple, " must be >= 1");
  DDP_USAGE_CHECK(c.n_head % c.n_kv_head == 0, "LlamaConfig::n_head=", c.n_head,
                  " must be a multiple of n_kv_head=", c.n_kv_head);
  DDP_USAGE_CHECK(c.pad_token_id >= -1 && c.pad_token_id < c.vocab_size,
                  "LlamaConfig::pad_token_id=", c.pad_token_id, " is not a token of the ", c.vocab_size,
                  "-token vocabulary (-1: none)");
  torch::nn::EmbeddingOptions embedding(c.vocab_size, c.n_embd);
  if (c.pad_token_id >= 0) embedding.padding_idx(c.pad_token_id);
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(embedding));
  {
    torch::NoGradGuard no_grad;
    torch::nn::init::normal_(embed_tokens->weight, 0.0, 0.02);
    if (c.pad_token_id >= 0) embed_tokens->weight[c.pad_token_id].zero_();
  }
  // Each vocabulary matrix is padded as soon as it is drawn (zero rows draw nothing), so that
  // a unit is whole when a sink takes it.
  const int64_t rows = padded_vocab(c.vocab_size, c.vocab_multiple);
  pad_vocab_rows(embed_tokens->weight, rows);
  // The lookup's backward reads no weights: ZeRO-3 gathers this unit for the forward only.
  if (!c.tie_embeddings)
    embed_unit_ = units_.add(embed_tokens.ptr(), "embed_tokens", UnitBackward::kReadsNoParameters);
  first_layer_unit_ = units_.size();
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.n_layer; ++i) {
    layers_.emplace_back(c);
    layers->push_back(layers_.back());
    units_.add(layers_.back().ptr(), str("layers.", i));
  }
  norm = register_module("norm", LlamaRmsNorm(c.n_embd, c.rms_norm_eps, c.fused_norm));
  if (!c.tie_embeddings) {
    lm_head = register_module("lm_head", llama_linear(c.n_embd, c.vocab_size, false));
    pad_vocab_rows(lm_head->weight, rows);
    head_unit_ = units_.add(lm_head.ptr(), "lm_head");
  }
  inv_freq_ = rotary_inv_freq(c.head_dim(), c.rope_theta);
}

at::Tensor LlamaImpl::forward(const at::Tensor& tokens) {
  const int64_t T = tokens.size(1);
  DDP_CHECK(T <= cfg_.block_size, "a sequence of ", T, " tokens is longer than the model's block_size ",
            cfg_.block_size);
  at::Tensor x = cfg_.tie_embeddings ? embed_tokens(tokens)
                                     : units_.run(embed_unit_, [&] { return embed_tokens(tokens); });
  if (inv_freq_.device() != tokens.device())
    inv_freq_ = inv_freq_.to(tokens.device());  // once, not a copy a step
  const auto [cos, sin] = rotary_cos_sin(T, inv_freq_);
  const bool recompute_now = cfg_.recompute_blocks && is_training() && at::GradMode::is_enabled();
  Residual r{x, {}};
  for (size_t i = 0; i < layers_.size(); ++i) {
    LlamaLayer layer = layers_[i];
    // See Note [The last block is not recomputed].
    r = run_block(
        units_, first_layer_unit_ + i, std::move(r), recompute_now && i + 1 < layers_.size(), *layer,
        [&](Residual in) { return layer->forward(std::move(in), cos, sin); },
        [layer, cos = cos, sin = sin](const at::Tensor& t) mutable { return layer->forward(t, cos, sin); });
  }
  // The last layer's residual add joins the final norm's passes (Note [Residual add in the next norm]).
  const at::Tensor h = norm->add_forward(r.x, r.branch).second;
  r = {};  // not kept through the logits
  const at::Tensor logits = cfg_.tie_embeddings ? at::linear(h, embed_tokens->weight)
                                                : units_.run(head_unit_, [&] { return linear(lm_head, h); });
  return real_vocab_logits(logits, cfg_.vocab_size);
}

int64_t LlamaImpl::matmul_params() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  // The padded rows' FLOPs are not the model's work (Note [Padded vocabulary]).
  const int64_t padding = (embed_tokens->weight.size(0) - cfg_.vocab_size) * cfg_.n_embd;
  return (cfg_.tie_embeddings ? n : n - embed_tokens->weight.numel()) - padding;
}

int64_t LlamaImpl::train_flops_per_token() const {
  return 6 * matmul_params() + 12 * cfg_.n_layer * cfg_.n_head * cfg_.head_dim() * cfg_.block_size;
}

int64_t LlamaImpl::train_flops_per_sample() const { return train_flops_per_token() * cfg_.block_size; }

std::string LlamaImpl::describe() const {
  const char* bias = cfg_.attention_bias == AttentionBias::kQkv   ? ", q/k/v biases"
                     : cfg_.attention_bias == AttentionBias::kAll ? ", attention biases"
                                                                  : "";
  return str("llama (", cfg_.n_layer, " layers, ", cfg_.n_head, " heads",
             cfg_.n_kv_head != cfg_.n_head ? str(" (", cfg_.n_kv_head, " key/value)") : std::string(), ", ",
             cfg_.n_embd, " wide, MLP ", cfg_.intermediate_size, ", block ", cfg_.block_size, ", vocab ",
             cfg_.vocab_size,
             embed_tokens->weight.size(0) > cfg_.vocab_size ? str(" padded to ", embed_tokens->weight.size(0))
                                                            : std::string(),
             cfg_.tie_embeddings ? ", tied" : "", bias, ", rope theta ", cfg_.rope_theta,
             cfg_.dropout > 0 ? str(", dropout ", cfg_.dropout) : std::string(), ")");
}

}  // namespace ddptrain
