// One training step, without logging: each micro-batch's forward and loss (under autocast),
// its backward (DDP all-reduces during the backward of a group's last micro-batch; the others
// accumulate locally, Note [no_sync and accumulation]), then the optimizer step: unscale,
// clip, step unless a gradient is inf/NaN, update the loss scale, free the gradients.
#pragma once

#include <cstdint>

#include "ddp/ddp.h"
#include "train/precision.h"
#include "train/train_state.h"
#include "train/trainable.h"

namespace ddptrain {

struct ForwardResult {
  at::Tensor output;
  at::Tensor loss;  // the objective's mean over the micro-batch (fp32 under autocast)
};

/// Rank 0's buffers to every rank (when broadcast_buffers and sync_buffers), then forward and
/// loss. sync_buffers: the micro-batch follows one whose gradients were reduced (a group's first,
/// or every one without no_sync), as PyTorch's DDP syncs buffers only in a forward after a
/// synced backward: once per accumulation group.
ForwardResult forward_loss(DistributedDataParallel& ddp, const Trainable& model, const Objective& objective,
                           const Precision& precision, c10::Device device, const at::Tensor& inputs,
                           const at::Tensor& targets, bool sync_buffers = true);

/// Backward of loss / group_size, scaled; `reduce`: DDP all-reduces the group's gradients
/// (false: under no_sync).
void backward(DistributedDataParallel& ddp, GradScaler& scaler, const at::Tensor& loss, int64_t group_size,
              bool reduce);

/// Unscale, clip (clip_grad_norm > 0; the norm goes to state.last_grad_norm), step unless
/// inf/NaN, update the scale, set the gradients to none. Counts the step in `state`; returns
/// whether the optimizer stepped.
bool optimizer_step(TrainState& state, double clip_grad_norm);

/// zero_grad(set_to_none=True), as the reference (LibTorch 1.13's has no set_to_none).
void zero_grad_set_to_none(torch::optim::Optimizer& opt);

}  // namespace ddptrain
