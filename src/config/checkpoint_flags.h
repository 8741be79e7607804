// Note [A checkpoint's own flags]
// eval and export rebuild a checkpoint's model and data from its config.json, then apply the
// flags given to them, and check the result as train checks its flags. But a check added after
// the checkpoint was trained refuses a combination its version took and ignored (AdamW's betas
// under sgd, a token model's sizes under mini_resnet), and the model it trained could no longer
// be evaluated or exported. So, before the command's own flags apply, the checkpoint's values
// that only training reads (the optimizer's values, the schedule's, the loss scaler's, the
// fused loss) and its model's fields that its model kind does not read go back to their
// defaults: neither changes the model or data rebuilt. The kinds (model, optimizer, precision,
// dataset) stay, so a flag given to eval or export is checked against them as train checks it.
#pragma once

#include "config/train_config.h"

namespace ddptrain {

/// The checkpoint's values only training reads, in `c` (its own flags, parsed), to their defaults.
void forget_what_only_training_reads(TrainConfig& c);

}  // namespace ddptrain
