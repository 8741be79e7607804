#include "train/precision_options.h"

#include "util/error.h"

namespace ddptrain {

void PrecisionOptions::validate() const {
  check_option_positive(scaler_init_scale, "precision.scaler_init_scale", "pass e.g. {0:65536}");
  // The scale is a float32: above its largest it is inf, and every step would be skipped.
  detail::check_option_bound(scaler_init_scale <= 3.4e38, scaler_init_scale, "precision.scaler_init_scale",
                             "at most 3.4e38 (float32's largest)", "pass e.g. {0:65536}", "TrainerOptions");
  check_option_positive(scaler_growth_interval, "precision.scaler_growth_interval", "pass e.g. {0:2000}");
}

}  // namespace ddptrain
