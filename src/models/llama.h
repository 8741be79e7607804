// Llama: a decoder-only transformer in the Llama shape, as transformers' LlamaForCausalLM
// computes it (Qwen2 and Mistral are the same with q/k/v biases or a sliding window):
// token embeddings, n_layer pre-RMSNorm layers (self-attention with rotary position
// embeddings, then a SwiGLU MLP, each added to the residual stream), a final RMSNorm and an
// output layer (lm_head, or the token embedding when tied). No position embedding table: a
// position enters only as the rotation of each query and key.
//  - Rotary embeddings in transformers' "rotate half" layout: a head's dimension i < d/2 is
//    paired with i + d/2 and rotated by position · theta^(-2i/d).
//  - Grouped-query attention: n_kv_head key/value heads, each shared by n_head / n_kv_head
//    query heads (n_kv_head = n_head: plain multi-head attention).
//  - RMSNorm in float32 whatever the input's dtype, then cast back, as transformers does
//    (--fused_norm: into the autocast dtype by one kernel each way, kernels/fused_layer_norm.h).
//  - Biases: none (Llama), on q/k/v (Qwen2: AttentionBias::kQkv), or on q/k/v/o (Llama's
//    attention_bias: kAll).
// The parameters' names are transformers' without "model." (embed_tokens, layers.N.self_attn.
// q_proj, ..., norm, lm_head), so a Hugging Face folder maps one to one (models/hf_llama.h).
// Initialisation as transformers': normal (0, 0.02) for every Linear and the embedding, zero
// biases and padding row, unit norms. Dropout (ModelOptions::dropout) on the attention weights only, as
// transformers' attention_dropout.
// Units (Note [Units]): each decoder layer; untied, the embedding and lm_head too (each is a
// vocabulary-sized matrix, so under ZeRO-3 a rank holds and builds only its shard of them,
// Note [Units sharded as built]); the final norm, and a tied embedding (used at both ends of
// the forward, so by two units), stay in the root unit.
// FLOPs per token for MFU (PaLM, appendix B): 6·N + 12·L·H·d_head·T, N the parameters of the
// matmuls and norms: without the input embedding when untied (a lookup, not a matmul); with
// it once when tied (it is then the output layer's).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include "models/model.h"
#include "models/model_options.h"
#include "models/residual.h"

namespace ddptrain {

struct LlamaConfig {
  int64_t n_layer = 2;
  int64_t n_head = 2;
  int64_t n_kv_head = 2;  // key/value heads; n_head must be a multiple
  int64_t n_embd = 64;
  int64_t intermediate_size = 192;  // the SwiGLU MLP's hidden width
  int64_t block_size = 64;          // the training window: the longest sequence forward takes
  int64_t max_positions = 64;       // config.json's max_position_embeddings (>= block_size)
  int64_t vocab_size = 256;
  int64_t vocab_multiple = 1;  // embedding and lm_head rows rounded up (Note [Padded vocabulary])
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-6;
  bool tie_embeddings = false;
  AttentionBias attention_bias = AttentionBias::kNone;
  int64_t pad_token_id = -1;  // the embedding's padding row: zero at init, no gradient (-1: none)
  int64_t bos_token_id = -1;  // not used by the model: carried to an export (-1: none)
  int64_t eos_token_id = -1;
  std::vector<int64_t> eos_token_ids;  // every one, where a config listed several (an export's list)
  int64_t sliding_window = 0;     // not used by the model (block_size <= it): carried to an export (0: none)
  int64_t max_window_layers = 0;  // a Qwen2's first sliding layer: carried to an export
  double dropout = 0.0;           // on the attention weights
  bool recompute_blocks = false;  // recompute each layer in backward (models/recompute.h)
  FusedNorm fused_norm = FusedNorm::kOff;  // the RMSNorms (models/layer_norm.h)

  int64_t head_dim() const { return n_embd / n_head; }
};

/// The default MLP width for a model of width n_embd: 8/3 · n_embd (SwiGLU's three matrices
/// then hold as many weights as GPT's two of 4x), rounded up to a multiple of 64.
int64_t default_intermediate_size(int64_t n_embd);

struct LlamaRmsNormImpl : torch::nn::Module {
  LlamaRmsNormImpl(int64_t dim, double eps, FusedNorm fused = FusedNorm::kOff);
  at::Tensor forward(const at::Tensor& x);
  /// {h = x + branch, forward(h)}, in one pass each way where the norm is fused; an undefined
  /// branch: {x, forward(x)}.
  std::pair<at::Tensor, at::Tensor> add_forward(const at::Tensor& x, const at::Tensor& branch);
  double eps;
  FusedNorm fused;
  at::Tensor weight;
};
TORCH_MODULE(LlamaRmsNorm);

/// The rotation's frequencies theta^(-2i/d), i < d/2, in float32 on the CPU, as transformers
/// computes them.
at::Tensor rotary_inv_freq(int64_t head_dim, double theta);

/// cos and sin (T, head_dim) of the rotary embedding at positions 0..T-1, in float32 on
/// inv_freq's device.
std::pair<at::Tensor, at::Tensor> rotary_cos_sin(int64_t T, const at::Tensor& inv_freq);

struct LlamaAttentionImpl : torch::nn::Module {
  explicit LlamaAttentionImpl(const LlamaConfig& c);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
  int64_t n_head, n_kv_head, head_dim;
  double dropout;
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
};
TORCH_MODULE(LlamaAttention);

struct LlamaMlpImpl : torch::nn::Module {
  explicit LlamaMlpImpl(const LlamaConfig& c);
  at::Tensor forward(const at::Tensor& x);
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(LlamaMlp);

struct LlamaLayerImpl : torch::nn::Module {
  explicit LlamaLayerImpl(const LlamaConfig& c);
  /// The stream after this layer, its last residual add left to the next norm (Note [Residual
  /// add in the next norm]).
  Residual forward(Residual in, const at::Tensor& cos, const at::Tensor& sin);
  /// The same with the adds done: one tensor in and out (a recomputed layer's).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
  LlamaAttention self_attn{nullptr};
  LlamaMlp mlp{nullptr};
  LlamaRmsNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};
TORCH_MODULE(LlamaLayer);

class LlamaImpl : public Model {
 public:
  /// sink: Note [Units sharded as built] (null: none).
  explicit LlamaImpl(const LlamaConfig& c, UnitSink* sink = nullptr);
  /// tokens (B, T) int64 with T <= block_size -> logits (B, T, vocab_size) (of a padded
  /// vocabulary, a view of the real rows' logits: Note [Padded vocabulary]).
  at::Tensor forward(const at::Tensor& tokens) override;
  int64_t train_flops_per_sample() const override;  // block_size tokens
  std::string describe() const override;
  /// 6·N + 12·L·H·d_head·T at T = block_size.
  int64_t train_flops_per_token() const;
  /// The N of the FLOPs formula (see the file's comment).
  int64_t matmul_params() const;
  const LlamaConfig& config() const { return cfg_; }

  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  LlamaRmsNorm norm{nullptr};
  torch::nn::Linear lm_head{nullptr};  // null when tied

 private:
  LlamaConfig cfg_;
  std::vector<LlamaLayer> layers_;
  size_t embed_unit_ = 0, first_layer_unit_ = 0, head_unit_ = 0;  // untied: 0, 1..n_layer, n_layer + 1
  at::Tensor inv_freq_;  // computed on the CPU, then kept on the tokens' device; not a buffer (not state)
};
TORCH_MODULE(Llama);

}  // namespace ddptrain
