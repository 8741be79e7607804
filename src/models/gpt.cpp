#include "models/gpt.h"

#include <cmath>

#include <torch/nn/init.h>

#include "kernels/fused_linear.h"
#include "models/layer_norm.h"
#include "models/linear.h"
#include "models/vocab_padding.h"
#include "obs/logger.h"
#include "util/error.h"
#include "util/torch_compat.h"

namespace ddptrain {

GptConfig gpt_preset(GptPreset preset) {
  GptConfig c;
  switch (preset) {
    case GptPreset::kDebug:
      break;  // the defaults
    case GptPreset::kSmall:
      c.n_layer = 6, c.n_head = 6, c.n_embd = 384, c.block_size = 256, c.vocab_size = 256;
      break;
    case GptPreset::kGpt2_124m:
      c.n_layer = 12, c.n_head = 12, c.n_embd = 768, c.block_size = 1024, c.vocab_size = 50257;
      break;
  }
  return c;
}

namespace {

torch::nn::Linear gpt_linear(int64_t in, int64_t out, double std) {
  torch::nn::Linear l(in, out);
  torch::NoGradGuard no_grad;
  torch::nn::init::normal_(l->weight, 0.0, std);
  torch::nn::init::zeros_(l->bias);
  return l;
}

// `l` applied to `x`: through cuBLASLt's epilogues under --fused_linear auto (they take CUDA
// bf16/fp16 operands; elsewhere at::linear, as `linear` computes).
at::Tensor gpt_linear_forward(const torch::nn::Linear& l, const at::Tensor& x, FusedLinear mode) {
  return mode == FusedLinear::kAuto ? linear_with_epilogues(x, l->weight, l->bias) : linear(l, x);
}

}  // namespace

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GptConfig& c)
    : n_head(c.n_head), dropout(c.dropout), fused_linear(c.fused_linear) {
  c_attn = register_module("c_attn", gpt_linear(c.n_embd, 3 * c.n_embd, 0.02));
  c_proj = register_module("c_proj", gpt_linear(c.n_embd, c.n_embd, 0.02 / std::sqrt(2.0 * c.n_layer)));
  resid_drop = register_module("resid_drop", torch::nn::Dropout(c.dropout));
}

at::Tensor CausalSelfAttentionImpl::forward(const at::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), d = C / n_head;
  auto qkv = gpt_linear_forward(c_attn, x, fused_linear).split(C, 2);
  auto heads = [&](const at::Tensor& t) { return t.view({B, T, n_head, d}).transpose(1, 2); };
  auto y =
      compat::causal_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), is_training() ? dropout : 0.0);
  return resid_drop(gpt_linear_forward(c_proj, y.transpose(1, 2).contiguous().view({B, T, C}), fused_linear));
}

GptMlpImpl::GptMlpImpl(const GptConfig& c) : gelu_tanh(c.gelu_tanh), fused_linear(c.fused_linear) {
  c_fc = register_module("c_fc", gpt_linear(c.n_embd, 4 * c.n_embd, 0.02));
  c_proj = register_module("c_proj", gpt_linear(4 * c.n_embd, c.n_embd, 0.02 / std::sqrt(2.0 * c.n_layer)));
  drop = register_module("drop", torch::nn::Dropout(c.dropout));
}

at::Tensor GptMlpImpl::forward(const at::Tensor& x) {
  if (fused_linear == FusedLinear::kAuto)
    return drop(
        gelu_mlp_with_epilogues(x, c_fc->weight, c_fc->bias, c_proj->weight, c_proj->bias, gelu_tanh));
  return drop(linear(c_proj, at::gelu(linear(c_fc, x), gelu_tanh ? "tanh" : "none")));
}

GptBlockImpl::GptBlockImpl(const GptConfig& c) : fused_norm(c.fused_norm) {
  ln_1 = register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
  attn = register_module("attn", CausalSelfAttention(c));
  ln_2 = register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
  mlp = register_module("mlp", GptMlp(c));
}

Residual GptBlockImpl::forward(Residual in) {
  // Each residual add joins the next norm's passes: the previous block's joins ln_1's, the
  // attention's ln_2's (Note [Residual add in the next norm]).
  const auto [x, normed_1] = add_layer_norm(ln_1, in.x, in.branch, fused_norm);
  in = {};  // the previous branch is not kept through this block
  const auto [h, normed_2] = add_layer_norm(ln_2, x, attn(normed_1), fused_norm);
  return {h, mlp(normed_2)};
}

at::Tensor GptBlockImpl::forward(const at::Tensor& x) { return forward(Residual{x, {}}).sum(); }

GptImpl::GptImpl(const GptConfig& c, UnitSink* sink) : Model(sink), cfg_(c) {
  DDP_USAGE_CHECK(c.n_layer >= 1 && c.n_head >= 1 && c.n_embd >= 1 && c.block_size >= 1 && c.vocab_size >= 1,
                  "GPT sizes must be >= 1 (n_layer ", c.n_layer, ", n_head ", c.n_head, ", n_embd ", c.n_embd,
                  ", block_size ", c.block_size, ", vocab_size ", c.vocab_size, ")");
  DDP_USAGE_CHECK(c.vocab_multiple >= 1, "GptConfig::vocab_multiple=", c.vocab_multiple, " must be >= 1");
  DDP_USAGE_CHECK(c.n_embd % c.n_head == 0, "GptConfig::n_embd=", c.n_embd,
                  " must be a multiple of n_head=", c.n_head, ", e.g. ", c.n_head * 64);
  wte = register_module("wte", torch::nn::Embedding(c.vocab_size, c.n_embd));
  wpe = register_module("wpe", torch::nn::Embedding(c.block_size, c.n_embd));
  {
    torch::NoGradGuard no_grad;
    torch::nn::init::normal_(wte->weight, 0.0, 0.02);
    torch::nn::init::normal_(wpe->weight, 0.0, 0.02);
  }
  drop = register_module("drop", torch::nn::Dropout(c.dropout));
  h = register_module("h", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.n_layer; ++i) {
    blocks_.emplace_back(c);
    h->push_back(blocks_.back());
    units_.add(blocks_.back().ptr(), str("h.", i));
  }
  ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
  pad_vocab_rows(wte->weight, padded_vocab(c.vocab_size, c.vocab_multiple));  // after every draw
}

at::Tensor GptImpl::forward(const at::Tensor& tokens) {
  const int64_t T = tokens.size(1);
  DDP_CHECK(T <= cfg_.block_size, "a sequence of ", T, " tokens is longer than the model's block_size ",
            cfg_.block_size);
  auto pos = at::arange(T, tokens.options());
  Residual r{drop(wte(tokens) + wpe(pos)), {}};
  const bool recompute_now = cfg_.recompute_blocks && is_training() && at::GradMode::is_enabled();
  for (size_t i = 0; i < blocks_.size(); ++i) {
    GptBlock block = blocks_[i];
    // See Note [The last block is not recomputed].
    r = run_block(
        units_, i, std::move(r), recompute_now && i + 1 < blocks_.size(), *block,
        [&](Residual in) { return block->forward(std::move(in)); },
        [block](const at::Tensor& t) mutable { return block->forward(t); });
  }
  // The last block's residual add joins ln_f's passes (Note [Residual add in the next norm]).
  const at::Tensor normed = add_layer_norm(ln_f, r.x, r.branch, cfg_.fused_norm).second;
  r = {};                                                                      // not kept through the logits
  return real_vocab_logits(at::linear(normed, wte->weight), cfg_.vocab_size);  // tied output layer
}

int64_t GptImpl::non_embedding_params() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  // The padded rows' FLOPs are not the model's work (Note [Padded vocabulary]).
  return n - wpe->weight.numel() - (wte->weight.size(0) - cfg_.vocab_size) * cfg_.n_embd;
}

int64_t GptImpl::train_flops_per_token() const {
  const int64_t d_head = cfg_.n_embd / cfg_.n_head;
  return 6 * non_embedding_params() + 12 * cfg_.n_layer * cfg_.n_head * d_head * cfg_.block_size;
}

int64_t GptImpl::train_flops_per_sample() const { return train_flops_per_token() * cfg_.block_size; }

std::string GptImpl::describe() const {
  return str("gpt (", cfg_.n_layer, " layers, ", cfg_.n_head, " heads, ", cfg_.n_embd, " wide, block ",
             cfg_.block_size, ", vocab ", cfg_.vocab_size,
             wte->weight.size(0) > cfg_.vocab_size ? str(" padded to ", wte->weight.size(0)) : std::string(),
             cfg_.dropout > 0 ? str(", dropout ", cfg_.dropout) : std::string(),
             cfg_.gelu_tanh ? ", GELU tanh" : "", ")");
}

}  // namespace ddptrain
