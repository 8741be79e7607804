#include "train/precision_options.h"

#include "util/error.h"

namespace ddptrain {

void PrecisionOptions::validate() const {
  check_option_positive(scaler_init_scale, "precision.scaler_init_scale", "pass e.g. {0:65536}");
  check_option_positive(scaler_growth_interval, "precision.scaler_growth_interval", "pass e.g. {0:2000}");
}

}  // namespace ddptrain
