// ModelOptions: which model and its sizes, the model layer's own options; TrainConfig holds
// one (config/train_config.h).
#pragma once

#include <string>

#include "config/choices.h"

namespace ddptrain {

struct ModelOptions {
  ModelKind model = ModelKind::kMiniResnet;
  double width = 1.0;                        // channel multiplier (mini_resnet)
  GptPreset gpt_preset = GptPreset::kSmall;  // the sizes below override it
  int n_layer = 0;                           // 0: the preset's
  int n_head = 0;
  int n_embd = 0;
  int block_size = 0;
  int vocab_size = 0;
  double dropout = 0.0;            // inside each residual block (0: the reference model)
  std::string model_path;          // torchscript: the scripted module's file
  long long flops_per_sample = 0;  // torchscript: training FLOPs per sample, for MFU (0: no MFU)
  Recompute activation_checkpointing = Recompute::kNone;  // blocks: recompute blocks in backward
  MemoryFormat memory_format = MemoryFormat::kAuto;       // auto: channels_last for mini_resnet
};

}  // namespace ddptrain
