// PrecisionOptions: the precision a user asks for (train/precision.h chooses from it); no
// LibTorch here (the CLI's flags bind to it).
#pragma once

#include <cstdint>

#include "config/choices.h"

namespace ddptrain {

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
