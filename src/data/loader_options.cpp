#include "data/loader_options.h"

#include "util/error.h"

namespace ddptrain {

void LoaderOptions::validate() const {
  check_option_positive(batch_size, "data.batch_size", "pass the per-rank batch size, e.g. {0:64}");
  check_option_non_negative(num_workers, "data.num_workers", "pass {0:0} to load in the training thread");
  check_option_positive(prefetch_factor, "data.prefetch_factor", "pass e.g. {0:2}");
}

}  // namespace ddptrain
