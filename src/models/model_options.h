// ModelOptions: which model and its sizes, the model layer's own options; TrainConfig holds
// one (config/train_config.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/data_options.h"
#include "util/choices.h"

namespace ddptrain {

// The model layer's choices and their words (Note [Choices are enums], util/choices.h).
enum class ModelKind { kMiniResnet, kGpt, kTorchscript, kLlama };
enum class GptPreset { kDebug, kSmall, kGpt2_124m };
enum class MemoryFormat { kAuto, kChannelsLast, kContiguous };
enum class Recompute { kNone, kBlocks };
enum class GptActivation { kGelu, kGeluTanh };
enum class AttentionBias { kNone, kQkv, kAll };
// gpt's LayerNorm (Note [LayerNorm into the autocast dtype], kernels/fused_layer_norm.h): auto on
// CUDA under autocast (where the kernels are built), on everywhere, off: ATen's (the default
// until a GPU run has checked the kernels).
enum class FusedNorm { kAuto, kOn, kOff };
// gpt's Linear layers (Note [Linear epilogues in cuBLASLt], kernels/fused_linear.h): auto through
// cuBLASLt's epilogues on CUDA in bf16/fp16 (where the kernels are built), off: ATen's (the
// default until a GPU run has checked them).
enum class FusedLinear { kAuto, kOff };

inline const Choices<ModelKind>& model_choices() {
  static const Choices<ModelKind> c{{"mini_resnet", ModelKind::kMiniResnet},
                                    {"gpt", ModelKind::kGpt},
                                    {"torchscript", ModelKind::kTorchscript},
                                    {"llama", ModelKind::kLlama}};
  return c;
}
inline const Choices<GptPreset>& gpt_preset_choices() {
  static const Choices<GptPreset> c{
      {"debug", GptPreset::kDebug}, {"small", GptPreset::kSmall}, {"gpt2-124m", GptPreset::kGpt2_124m}};
  return c;
}
inline const Choices<MemoryFormat>& memory_format_choices() {
  static const Choices<MemoryFormat> c{{"auto", MemoryFormat::kAuto},
                                       {"channels_last", MemoryFormat::kChannelsLast},
                                       {"contiguous", MemoryFormat::kContiguous}};
  return c;
}
inline const Choices<Recompute>& recompute_choices() {
  static const Choices<Recompute> c{{"none", Recompute::kNone}, {"blocks", Recompute::kBlocks}};
  return c;
}
inline const Choices<GptActivation>& gpt_activation_choices() {
  static const Choices<GptActivation> c{{"gelu", GptActivation::kGelu},
                                        {"gelu_tanh", GptActivation::kGeluTanh}};
  return c;
}
inline const Choices<AttentionBias>& attention_bias_choices() {
  static const Choices<AttentionBias> c{
      {"none", AttentionBias::kNone}, {"qkv", AttentionBias::kQkv}, {"all", AttentionBias::kAll}};
  return c;
}
inline const Choices<FusedNorm>& fused_norm_choices() {
  static const Choices<FusedNorm> c{
      {"auto", FusedNorm::kAuto}, {"on", FusedNorm::kOn}, {"off", FusedNorm::kOff}};
  return c;
}
inline const Choices<FusedLinear>& fused_linear_choices() {
  static const Choices<FusedLinear> c{{"auto", FusedLinear::kAuto}, {"off", FusedLinear::kOff}};
  return c;
}
inline const char* word(ModelKind v) { return model_choices().word(v); }
inline const char* word(GptPreset v) { return gpt_preset_choices().word(v); }
inline const char* word(MemoryFormat v) { return memory_format_choices().word(v); }
inline const char* word(Recompute v) { return recompute_choices().word(v); }
inline const char* word(GptActivation v) { return gpt_activation_choices().word(v); }
inline const char* word(AttentionBias v) { return attention_bias_choices().word(v); }
inline const char* word(FusedNorm v) { return fused_norm_choices().word(v); }
inline const char* word(FusedLinear v) { return fused_linear_choices().word(v); }

/// The models that read tokens: gpt and llama (sized by gpt_preset and the size fields).
inline bool is_decoder_model(ModelKind m) { return m == ModelKind::kGpt || m == ModelKind::kLlama; }

struct ModelOptions {
  ModelKind model = ModelKind::kMiniResnet;
  double width = 1.0;                        // channel multiplier (mini_resnet)
  GptPreset gpt_preset = GptPreset::kSmall;  // gpt and llama: the sizes below override it
  int n_layer = 0;                           // 0: the preset's
  int n_head = 0;
  int n_embd = 0;
  int block_size = 0;
  int vocab_size = 0;
  int vocab_multiple =
      1;  // gpt, llama: embedding/output rows rounded up to a multiple (Note [Padded vocabulary])
  GptActivation gpt_activation = GptActivation::kGelu;  // gpt's MLP: exact GELU, or its tanh form (GPT-2's)
  // gpt's LayerNorm, llama's RMSNorm into the autocast dtype (kernels/fused_layer_norm.h); off until a GPU
  // run has checked the CUDA kernels (docs/status.md), then auto.
  FusedNorm fused_norm = FusedNorm::kOff;
  // gpt's Linear layers through cuBLASLt's epilogues (GELU, bias gradients: kernels/fused_linear.h); off
  // until a GPU run has checked them (docs/status.md), then auto.
  FusedLinear fused_linear = FusedLinear::kOff;
  // llama's own (a Hugging Face config's names in brackets):
  int n_kv_head = 0;                                    // key/value heads [num_key_value_heads] (0: n_head)
  int intermediate_size = 0;                            // the MLP's width (0: 8/3 n_embd rounded up to 64)
  int max_positions = 0;                                // [max_position_embeddings] (0: block_size)
  double rope_theta = 10000.0;                          // the rotary embedding's base
  double rms_norm_eps = 1e-6;                           // RMSNorm's epsilon
  bool tie_embeddings = false;                          // lm_head is the token embedding
  AttentionBias attention_bias = AttentionBias::kNone;  // qkv: Qwen2's; all: q/k/v/o [attention_bias]
  int pad_token_id = -1;  // its embedding row gets no gradient, as transformers' padding_idx (-1: none)
  int bos_token_id = -1;  // carried to an export's config.json (-1: none)
  int eos_token_id = -1;
  // Every end-of-sequence id where a config listed several (Llama 3's "128001,128008,128009",
  // comma-separated, eos_token_id first), carried to an export ("": eos_token_id alone).
  std::string eos_token_ids;
  // A Mistral's or Qwen2's attention window [sliding_window], carried to an export (0: none).
  // The model attends within --block_size, which must not exceed it: there the window changes
  // nothing.
  int sliding_window = 0;
  // A Qwen2's first layer that slides [max_window_layers]: the layers before it attend to the
  // whole sequence (0: every layer slides, as a Mistral's).
  int max_window_layers = 0;
  std::string init_from_hf;  // gpt, llama: a Hugging Face folder: its sizes (and, in train, its weights)
  double dropout = 0.0;      // inside each residual block (0: the reference model)
  std::string model_path;    // torchscript: the scripted module's file
  long long flops_per_sample = 0;  // torchscript: training FLOPs per sample, for MFU (0: no MFU)
  Recompute activation_checkpointing = Recompute::kNone;  // blocks: recompute blocks in backward
  MemoryFormat memory_format = MemoryFormat::kAuto;       // auto: channels_last for mini_resnet

  /// OptionError naming the field, its value and the fix (Note [Options named by their
  /// field]): sizes out of range, a model that does not read `data` (gpt reads tokens, the
  /// image models images), a scripted module without its file (or, on token data, its
  /// sizes), and a field this model has no use for set anyway (it would be silently ignored).
  void validate(const DataOptions& data) const;
};

/// ModelOptions::eos_token_ids as numbers ("": none); nullopt when it is not a comma-separated
/// list of token ids.
std::optional<std::vector<int64_t>> parse_token_ids(const std::string& ids);

}  // namespace ddptrain
