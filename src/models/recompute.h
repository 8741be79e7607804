// Activation recompute (activation checkpointing): run a block without keeping its
// activations and recompute them during backward, trading compute for memory.
// Note [Recompute under DDP]: a custom autograd function whose inputs are the block's input
// AND its parameters. Forward runs the block without building a graph and saves only the
// input, the RNG states and the autocast state. Backward restores them, re-runs the block
// with grad enabled and takes d(input) and d(params) with autograd::grad, which fills no
// .grad and fires no AccumulateGrad hook; the parameter gradients then flow out of this
// node like any other, so DDP's hooks fire once per parameter, in the outer backward, in
// the usual order. Buffers (BatchNorm running statistics) are restored after the
// recompute, so they are updated once per step as without recompute. Dropout draws the
// same mask in the recompute (same RNG state), so gradients are bitwise those without it.
// Note [The last block is not recomputed]: the models recompute every block but the last.
// Backward needs the last block's activations first, right after forward made them: a
// recompute there would rebuild what was just freed, costing a block's forward for almost no
// memory (the last block is also the smallest in MiniResNet). PyTorch's checkpoint_sequential
// runs its last segment normally for the same reason.
#pragma once

#include <functional>
#include <vector>

#include <ATen/ATen.h>

namespace ddptrain {

using BlockFn = std::function<at::Tensor(const at::Tensor&)>;

/// fn(x), recomputed in backward. params: the tensors fn uses that need gradients;
/// buffers: state fn mutates that must be updated only once (running statistics).
at::Tensor recompute(BlockFn fn, const at::Tensor& x, const std::vector<at::Tensor>& params,
                     const std::vector<at::Tensor>& buffers);

}  // namespace ddptrain
