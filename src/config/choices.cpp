#include "config/choices.h"

namespace ddptrain {

const Choices<DatasetKind>& dataset_choices() {
  static const Choices<DatasetKind> c{{"synthetic", DatasetKind::kSynthetic},
                                      {"fashion-mnist", DatasetKind::kFashionMnist},
                                      {"mnist", DatasetKind::kMnist},
                                      {"cifar10", DatasetKind::kCifar10},
                                      {"tensors", DatasetKind::kTensors},
                                      {"tokens", DatasetKind::kTokens},
                                      {"text", DatasetKind::kText}};
  return c;
}

const Choices<ModelKind>& model_choices() {
  static const Choices<ModelKind> c{{"mini_resnet", ModelKind::kMiniResnet},
                                    {"gpt", ModelKind::kGpt},
                                    {"torchscript", ModelKind::kTorchscript}};
  return c;
}

const Choices<GptPreset>& gpt_preset_choices() {
  static const Choices<GptPreset> c{
      {"debug", GptPreset::kDebug}, {"small", GptPreset::kSmall}, {"gpt2-124m", GptPreset::kGpt2_124m}};
  return c;
}

const Choices<MemoryFormat>& memory_format_choices() {
  static const Choices<MemoryFormat> c{{"auto", MemoryFormat::kAuto},
                                       {"channels_last", MemoryFormat::kChannelsLast},
                                       {"contiguous", MemoryFormat::kContiguous}};
  return c;
}

const Choices<Recompute>& recompute_choices() {
  static const Choices<Recompute> c{{"none", Recompute::kNone}, {"blocks", Recompute::kBlocks}};
  return c;
}

const Choices<OptimizerKind>& optimizer_choices() {
  static const Choices<OptimizerKind> c{{"sgd", OptimizerKind::kSgd}, {"adamw", OptimizerKind::kAdamw}};
  return c;
}

const Choices<LrSchedule>& schedule_choices() {
  static const Choices<LrSchedule> c{{"auto", LrSchedule::kAuto},
                                     {"constant", LrSchedule::kConstant},
                                     {"epoch_cosine", LrSchedule::kEpochCosine},
                                     {"step_cosine", LrSchedule::kStepCosine}};
  return c;
}

const Choices<AmpDtype>& amp_dtype_choices() {
  static const Choices<AmpDtype> c{
      {"auto", AmpDtype::kAuto}, {"fp16", AmpDtype::kFp16}, {"bf16", AmpDtype::kBf16}};
  return c;
}

const Choices<ScalerMode>& scaler_mode_choices() {
  static const Choices<ScalerMode> c{
      {"auto", ScalerMode::kAuto}, {"on", ScalerMode::kOn}, {"off", ScalerMode::kOff}};
  return c;
}

const Choices<CommHook>& comm_hook_choices() {
  static const Choices<CommHook> c{
      {"none", CommHook::kNone}, {"fp16", CommHook::kFp16}, {"bf16", CommHook::kBf16}};
  return c;
}

const Choices<LossKind>& loss_choices() {
  static const Choices<LossKind> c{{"cross_entropy", LossKind::kCrossEntropy}, {"mse", LossKind::kMse}};
  return c;
}

}  // namespace ddptrain
