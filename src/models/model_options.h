// ModelOptions: which model and its sizes, the model layer's own options; TrainConfig holds
// one (config/train_config.h).
#pragma once

#include <string>

#include "data/data_options.h"
#include "util/choices.h"

namespace ddptrain {

// The model layer's choices and their words (Note [Choices are enums], util/choices.h).
enum class ModelKind { kMiniResnet, kGpt, kTorchscript };
enum class GptPreset { kDebug, kSmall, kGpt2_124m };
enum class MemoryFormat { kAuto, kChannelsLast, kContiguous };
enum class Recompute { kNone, kBlocks };
enum class GptActivation { kGelu, kGeluTanh };

inline const Choices<ModelKind>& model_choices() {
  static const Choices<ModelKind> c{{"mini_resnet", ModelKind::kMiniResnet},
                                    {"gpt", ModelKind::kGpt},
                                    {"torchscript", ModelKind::kTorchscript}};
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
inline const char* word(ModelKind v) { return model_choices().word(v); }
inline const char* word(GptPreset v) { return gpt_preset_choices().word(v); }
inline const char* word(MemoryFormat v) { return memory_format_choices().word(v); }
inline const char* word(Recompute v) { return recompute_choices().word(v); }
inline const char* word(GptActivation v) { return gpt_activation_choices().word(v); }

struct ModelOptions {
  ModelKind model = ModelKind::kMiniResnet;
  double width = 1.0;                        // channel multiplier (mini_resnet)
  GptPreset gpt_preset = GptPreset::kSmall;  // the sizes below override it
  int n_layer = 0;                           // 0: the preset's
  int n_head = 0;
  int n_embd = 0;
  int block_size = 0;
  int vocab_size = 0;
  GptActivation gpt_activation = GptActivation::kGelu;  // gpt's MLP: exact GELU, or its tanh form (GPT-2's)
  std::string init_from_hf;        // gpt: a Hugging Face GPT-2 folder: its sizes (and, in train, its weights)
  double dropout = 0.0;            // inside each residual block (0: the reference model)
  std::string model_path;          // torchscript: the scripted module's file
  long long flops_per_sample = 0;  // torchscript: training FLOPs per sample, for MFU (0: no MFU)
  Recompute activation_checkpointing = Recompute::kNone;  // blocks: recompute blocks in backward
  MemoryFormat memory_format = MemoryFormat::kAuto;       // auto: channels_last for mini_resnet

  /// OptionError naming the field, its value and the fix (Note [Options named by their
  /// field]): sizes out of range, a model that does not read `data` (gpt reads tokens, the
  /// image models images), a scripted module without its file (or, on token data, its
  /// sizes), and a field this model has no use for set anyway (it would be silently ignored).
  void validate(const DataOptions& data) const;
};

}  // namespace ddptrain
