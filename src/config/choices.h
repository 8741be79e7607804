// Note [Choices are enums]
// A flag whose value is one of a few words (--dataset, --model, --optimizer, ...) is an enum
// in the options, and each enum has one table of its words (Choices). From that table come
// the parsing and its error (naming the words), the words in --help, and the word wherever
// a value is shown or saved (logs, metrics, config.json, a checkpoint's run identity); the
// code that acts on a choice switches on the enum, so a misspelt word cannot reach it.
// No LibTorch here: the config (ddpbase) and the library (ddpcore) share these.
#pragma once

#include <initializer_list>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "ddp/comm_hook.h"
#include "train/lr_schedule.h"

namespace ddptrain {

template <typename E>
struct Choice {
  const char* word;
  E value;
};

template <typename E>
class Choices {
 public:
  Choices(std::initializer_list<Choice<E>> choices) : choices_(choices) {}
  const char* word(E value) const {
    for (const auto& c : choices_)
      if (c.value == value) return c.word;
    return "?";
  }
  std::optional<E> parse(const std::string& word) const {
    for (const auto& c : choices_)
      if (word == c.word) return c.value;
    return std::nullopt;
  }
  /// "sgd | adamw"
  std::string list(const char* separator = " | ") const {
    std::string out;
    for (const auto& c : choices_) out += (out.empty() ? "" : separator) + std::string(c.word);
    return out;
  }

 private:
  std::vector<Choice<E>> choices_;
};

enum class DatasetKind { kSynthetic, kFashionMnist, kMnist, kCifar10, kTensors, kTokens, kText };
enum class ModelKind { kMiniResnet, kGpt, kTorchscript };
enum class GptPreset { kDebug, kSmall, kGpt2_124m };
enum class MemoryFormat { kAuto, kChannelsLast, kContiguous };
enum class Recompute { kNone, kBlocks };
enum class OptimizerKind { kSgd, kAdamw };
enum class AmpDtype { kAuto, kFp16, kBf16 };
enum class ScalerMode { kAuto, kOn, kOff };
enum class LossKind { kCrossEntropy, kMse };

const Choices<DatasetKind>& dataset_choices();
const Choices<ModelKind>& model_choices();
const Choices<GptPreset>& gpt_preset_choices();
const Choices<MemoryFormat>& memory_format_choices();
const Choices<Recompute>& recompute_choices();
const Choices<OptimizerKind>& optimizer_choices();
const Choices<LrSchedule>& schedule_choices();
const Choices<AmpDtype>& amp_dtype_choices();
const Choices<ScalerMode>& scaler_mode_choices();
const Choices<CommHook>& comm_hook_choices();
const Choices<LossKind>& loss_choices();

/// The word of a value, from its table: word(DatasetKind::kText) is "text".
inline const char* word(DatasetKind v) { return dataset_choices().word(v); }
inline const char* word(ModelKind v) { return model_choices().word(v); }
inline const char* word(GptPreset v) { return gpt_preset_choices().word(v); }
inline const char* word(MemoryFormat v) { return memory_format_choices().word(v); }
inline const char* word(Recompute v) { return recompute_choices().word(v); }
inline const char* word(OptimizerKind v) { return optimizer_choices().word(v); }
inline const char* word(LrSchedule v) { return schedule_choices().word(v); }
inline const char* word(AmpDtype v) { return amp_dtype_choices().word(v); }
inline const char* word(ScalerMode v) { return scaler_mode_choices().word(v); }
inline const char* word(CommHook v) { return comm_hook_choices().word(v); }
inline const char* word(LossKind v) { return loss_choices().word(v); }

/// A choice streams as its word, so messages built with str() or concat() show "adamw".
template <typename E, typename = decltype(word(std::declval<E>()))>
std::ostream& operator<<(std::ostream& os, E value) {
  return os << word(value);
}

/// Token sequences (for gpt), not images.
inline bool is_token_dataset(DatasetKind d) { return d == DatasetKind::kTokens || d == DatasetKind::kText; }

}  // namespace ddptrain
