// Gpt: a decoder-only transformer language model in the GPT-2 shape: token and position
// embeddings, n_layer pre-LayerNorm blocks (causal self-attention, then a GELU MLP of 4x
// width, each added to the residual stream), a final LayerNorm, and output logits through the
// token embedding (tied weights: one parameter, wte.weight). Dropout after the embeddings,
// on the attention weights and after each residual branch. Initialisation as GPT-2: normal
// (0, 0.02), the residual projections scaled by 1/sqrt(2·n_layer), zero biases.
// Attention is scaled_dot_product_attention with is_causal on LibTorch 2.x and a plain masked
// softmax on 1.13 (util/torch_compat.h).
// FLOPs per token for MFU (PaLM, appendix B): 6·N + 12·L·H·d_head·T, N the parameters
// without the position embedding (the tied embedding counts once: its matmul is the output
// layer's).
#pragma once

#include "models/model_options.h"

#include <string>
#include <vector>

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "models/model.h"
#include "models/residual.h"

namespace ddptrain {

struct GptConfig {
  int64_t n_layer = 2;
  int64_t n_head = 2;
  int64_t n_embd = 64;
  int64_t block_size = 64;  // the longest sequence (context length)
  int64_t vocab_size = 256;
  int64_t vocab_multiple = 1;  // the embedding rows rounded up to a multiple (Note [Padded vocabulary])
  double dropout = 0.0;
  bool gelu_tanh = false;         // the MLP's GELU in its tanh form (GPT-2's gelu_new), not the exact one
  bool recompute_blocks = false;  // recompute each block in backward (models/recompute.h)
  FusedNorm fused_norm = FusedNorm::kOff;        // the LayerNorms (models/layer_norm.h)
  FusedLinear fused_linear = FusedLinear::kOff;  // the Linear layers (kernels/fused_linear.h)
  int64_t bos_token_id = -1;  // not used by the model: carried to an export (-1: none, exported as null)
  int64_t eos_token_id = -1;
  std::vector<int64_t> eos_token_ids;  // every one, where a config listed several (an export's list)
};

/// debug (2 layers x 64, block 64, vocab 256: for tests), small (6 x 384, 6 heads, block 256,
/// vocab 256: byte-level text on a CPU), gpt2-124m (12 x 768, 12 heads, block 1024, vocab
/// 50257).
GptConfig gpt_preset(GptPreset preset);

struct CausalSelfAttentionImpl : torch::nn::Module {
  explicit CausalSelfAttentionImpl(const GptConfig& c);
  at::Tensor forward(const at::Tensor& x);
  int64_t n_head;
  double dropout;
  FusedLinear fused_linear;
  torch::nn::Linear c_attn{nullptr}, c_proj{nullptr};
  torch::nn::Dropout resid_drop{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

struct GptMlpImpl : torch::nn::Module {
  explicit GptMlpImpl(const GptConfig& c);
  at::Tensor forward(const at::Tensor& x);
  bool gelu_tanh;
  FusedLinear fused_linear;
  torch::nn::Linear c_fc{nullptr}, c_proj{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(GptMlp);

struct GptBlockImpl : torch::nn::Module {
  explicit GptBlockImpl(const GptConfig& c);
  /// The stream after this block, its last residual add left to the next norm (Note [Residual
  /// add in the next norm]).
  Residual forward(Residual in);
  /// The same with the adds done: one tensor in and out (a recomputed block's).
  at::Tensor forward(const at::Tensor& x);
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  CausalSelfAttention attn{nullptr};
  GptMlp mlp{nullptr};
  FusedNorm fused_norm;
};
TORCH_MODULE(GptBlock);

class GptImpl : public Model {
 public:
  /// sink: Note [Units sharded as built] (null: none).
  explicit GptImpl(const GptConfig& c, UnitSink* sink = nullptr);
  /// tokens (B, T) int64 with T <= block_size -> logits (B, T, vocab_size) (of a padded
  /// vocabulary, a view of the real rows' logits: Note [Padded vocabulary]).
  at::Tensor forward(const at::Tensor& tokens) override;
  int64_t train_flops_per_sample() const override;  // block_size tokens
  std::string describe() const override;
  /// 6·N + 12·L·H·d_head·T at T = block_size.
  int64_t train_flops_per_token() const;
  /// Parameters without the position embedding and the padded vocabulary rows (the N of the
  /// FLOPs formula).
  int64_t non_embedding_params() const;
  const GptConfig& config() const { return cfg_; }

  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::Dropout drop{nullptr};
  torch::nn::ModuleList h{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};

 private:
  GptConfig cfg_;
  std::vector<GptBlock> blocks_;
};
TORCH_MODULE(Gpt);

}  // namespace ddptrain
