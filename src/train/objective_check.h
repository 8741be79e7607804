// What `--loss` means, and the check before training that the data and the model fit it:
// class indices for cross-entropy and float targets for mse; for a module ddptrain did not
// build (a scripted one) one forward of a two-sample batch whose output must have the shape
// the loss needs. Every rank checks the same samples with the same weights, so a misfit is
// the same UsageError (exit 2) on every rank, before the first collective: no hang.
#pragma once

#include <string>

#include "data/datasets.h"
#include "train/loss_kind.h"
#include "train/trainable.h"

namespace ddptrain {

/// cross_entropy: Objective::classification(); mse: Objective::mean_squared_error().
Objective objective_for(LossKind loss, FusedLoss fused = FusedLoss::kAuto);

struct FitCheck {
  LossKind loss = LossKind::kCrossEntropy;
  bool run_forward = false;  // also check the model's output (in eval mode, without gradients)
  bool channels_last = false;
  c10::Device device = c10::kCPU;
  std::string model_name;                    // for messages: "--model_path='net.pt'"
  std::string data_name;                     // for messages: "--dataset synthetic"
  std::string loss_name = "FitCheck::loss";  // for messages: "--loss"
};

/// The cause in an error's text: LibTorch's first line; for the TorchScript interpreter, whose
/// first line only says that an operation failed, the error its traceback ends with (the op
/// and the shapes).
std::string cause_of(const std::string& what);

/// UsageError naming the model, the data, the shapes and the fix when they do not fit; a
/// warning for the log where they fit with more logits than the data's classes, else "".
std::string check_model_fits_data(const Trainable& model, const Dataset& data, const FitCheck& check);

/// The Trainer's check for any objective (check.loss and check.run_forward unused): one
/// forward of the data's first two samples, in eval mode without gradients, and the
/// objective's loss of it; UsageError naming the shapes and the cause when either fails or
/// the loss is not one number. Every rank reaches the same verdict (the same samples).
void check_objective_fits(const Trainable& model, const Dataset& data, const Objective& objective,
                          const FitCheck& check);

}  // namespace ddptrain
