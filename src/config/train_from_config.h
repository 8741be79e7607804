// `ddptrain train`'s use of the Trainer: the built-in datasets and models from the flags,
// TrainerOptions from the same flags, then Trainer::fit. Also what the program owns around
// it: the model's initialisation seed (the same on every rank, then seed + rank for what the
// model draws while training, e.g. dropout), --init_from, fault injection from the
// environment and the stop request from the signal handlers (train/stop_signal.h).
#pragma once

#include <string>

#include "config/train_config.h"
#include "data/datasets.h"
#include "dist/dist_context.h"
#include "train/folder_claim.h"
#include "train/trainer.h"
#include "train/trainer_options.h"

namespace ddptrain {

/// The DistContext's options from the flags (--backend, --dist_timeout_s, --rendezvous_timeout_s,
/// --flight_recorder); what a program adds (on_peer_failure) it sets itself.
DistOptionsResolved dist_options(const DistOptions& d);

/// The Trainer's options from the flags; `config_json` is saved with every checkpoint.
TrainerOptions trainer_options(const TrainConfig& cfg, const std::string& config_json);

/// Claims --checkpoint_dir for the run of the flags (Note [A run claims its checkpoint folder],
/// train/folder_claim.h: the checkpoint chosen by the flags' run identity, Note [Run identity])
/// before anything is written, and makes cfg's checkpoint options say its choice; a usage
/// error in flag words when the choice belongs to another run. Collectives.
std::shared_ptr<CheckpointFolderClaim> claim_checkpoint_folder(TrainConfig& cfg, const DistContext& ctx);

/// `e` in flag words, its fields members of cfg or of a copy of the part of cfg its owner names
/// (OptionError::within): "DataOptions::data_dir" is --data_dir.
std::string in_train_flag_words(const OptionError& e, const TrainConfig& cfg);

/// The datasets of the flags (make_datasets), a usage error in flag words when they cannot be
/// read: "--data_dir: folder '/x' has no train-images-idx3-ubyte(.gz): ...".
/// Given `trained` (a checkpoint's record), the test split alone.
DataSplits datasets_from(const TrainConfig& cfg, const TrainingSplit* trained = nullptr);

/// Runs the configured training on this rank; the Trainer gets `claim` (made from cfg) or claims
/// the folder itself.
TrainResult train(const TrainConfig& cfg, const DistContext& ctx, const std::string& config_json,
                  std::shared_ptr<CheckpointFolderClaim> claim = nullptr);

}  // namespace ddptrain
