// Note [Residual add in the next norm]
// A pre-norm transformer block ends with a residual add (x + mlp(...)) whose sum the next
// block's first norm reads at once. Done in that order, the add is a pass of its own each way
// (fp32 + bf16 under autocast: ATen's unvectorised mixed-dtype kernel), and backward sums the
// sum's two gradients (the next norm's and the residual path's) in another pass and casts the
// branch's in a third. So GPT's and Llama's blocks leave that add undone: a block returns the
// stream as a Residual {x, branch}, and the next block's first norm takes both, adding them in
// its own pass (add_layer_norm, LlamaRmsNorm::add_forward: Note [LayerNorm into the autocast
// dtype]), as the final norm does after the last block. With the fused norms that is one pass
// each way for every residual add of the model, where the block's second norm already took the
// attention's. The same function in the same ops where the norm is not fused (the add, then
// the norm: bitwise as before). A unit's output is then two tensors, and ZeRO-3 hooks both
// (Units::run_pair: both gradients come from the next norm's node; the branch's node, made
// later, runs first, and its hook gathers the unit again). A block drops its reference to the
// branch once its first norm has read it (the previous block's bf16 branch is not kept through
// this block's forward). A recomputed block (Note [Recompute under DDP]) takes and returns one tensor, the
// sum.
#pragma once

#include <functional>
#include <utility>

#include <ATen/ATen.h>

#include "ddp/units.h"
#include "models/recompute.h"

namespace ddptrain {

/// The residual stream between blocks: x + branch, the add not done yet (branch undefined: x).
struct Residual {
  at::Tensor x;
  at::Tensor branch;

  /// The stream as one tensor (the add done here).
  at::Tensor sum() const { return branch.defined() ? x + branch : x; }
};

/// A decoder's block `module` as unit `unit` of `units` on the stream `r`: recomputed
/// (Note [Recompute under DDP]), through `forward_sum` on the sum, one tensor in and out;
/// else through `forward`, the stream's last add left to the next norm.
inline Residual run_block(const Units& units, size_t unit, Residual r, bool recomputed,
                          torch::nn::Module& module, const std::function<Residual(Residual)>& forward,
                          const BlockFn& forward_sum) {
  if (recomputed)
    return {units.run(unit, [&] { return recompute(forward_sum, r.sum(), module.parameters(), {}); }), {}};
  auto [x, branch] = units.run_pair(unit, [&] {
    const Residual out = forward(std::move(r));
    return std::make_pair(out.x, out.branch);
  });
  return {std::move(x), std::move(branch)};
}

}  // namespace ddptrain
