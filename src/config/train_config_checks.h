// The checks of a resolved TrainConfig: each part's own validate(), the program's flags, and
// the flags the chosen model, optimizer or run has no use for (an error, never silently
// ignored). A bad field is named by its flag (Note [Options named by their field]).
#pragma once

#include <vector>

#include "config/flag_table.h"
#include "config/train_config.h"

namespace ddptrain {

/// Every part, in the order the flags are listed; UsageError naming the flag.
void validate_train_config(TrainConfig& c, const std::vector<Flag>& table);

}  // namespace ddptrain
