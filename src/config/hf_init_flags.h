// --init_from_hf DIR in the command's flags: the model and its sizes from DIR's config.json,
// checked against the flags the command line gives.
#pragma once

#include <string>
#include <vector>

#include "config/flag_table.h"
#include "config/train_config.h"

namespace ddptrain {

/// c.model.init_from_hf (made absolute) sets c's model from its config.json and becomes the
/// Trainer's init_from; `table` is c's flag table and `args` the command line's flags, each of
/// which must agree with the config (a value at its default included). UsageError otherwise.
void from_hugging_face(TrainConfig& c, const std::vector<Flag>& table, const std::vector<std::string>& args);

}  // namespace ddptrain
