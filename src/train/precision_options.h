// PrecisionOptions: the precision a user asks for (train/precision.h chooses from it); no
// LibTorch here (the CLI's flags bind to it).
#pragma once

#include <cstdint>

#include "util/choices.h"

namespace ddptrain {

// The autocast dtype and the loss scaler's mode, with their words (Note [Choices are enums],
// util/choices.h).
enum class AmpDtype { kAuto, kFp16, kBf16 };
enum class ScalerMode { kAuto, kOn, kOff };

inline const Choices<AmpDtype>& amp_dtype_choices() {
  static const Choices<AmpDtype> c{
      {"auto", AmpDtype::kAuto}, {"fp16", AmpDtype::kFp16}, {"bf16", AmpDtype::kBf16}};
  return c;
}
inline const Choices<ScalerMode>& scaler_mode_choices() {
  static const Choices<ScalerMode> c{
      {"auto", ScalerMode::kAuto}, {"on", ScalerMode::kOn}, {"off", ScalerMode::kOff}};
  return c;
}
inline const char* word(AmpDtype v) { return amp_dtype_choices().word(v); }
inline const char* word(ScalerMode v) { return scaler_mode_choices().word(v); }

/// What a user asks for (TrainerOptions::precision; `ddptrain train --use_amp --amp_dtype
/// --grad_scaler --scaler_init_scale --scaler_growth_interval`).
struct PrecisionOptions {
  bool use_amp = true;                         // autocast where the device supports it
  AmpDtype amp_dtype = AmpDtype::kAuto;        // see the top of this file
  ScalerMode grad_scaler = ScalerMode::kAuto;  // auto: with fp16 autocast
  double scaler_init_scale = 65536.0;          // the loss scale to start from
  int64_t scaler_growth_interval = 2000;       // finite steps before the loss scale doubles

  /// OptionError naming the field (Note [Options named by their field], util/error.h).
  void validate() const;
};

}  // namespace ddptrain
