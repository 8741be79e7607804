#include "train/train_step.h"

#include <mutex>
#include <optional>
#include <unordered_set>
#include <utility>

#include <torch/nn/functional/loss.h>

#include "ddp/zero_optimizer.h"
#include "kernels/fused_cross_entropy.h"
#include "optim/grad_clip.h"
#include "util/error.h"
#include "util/torch_compat.h"

namespace ddptrain {

namespace {

bool use_fused_loss(FusedLoss fused, const at::Tensor& logits) {
  if (fused == FusedLoss::kOff || logits.dim() != 3) return false;
  return fused == FusedLoss::kOn || (logits.is_cuda() && fused_cross_entropy_has_cuda());
}

}  // namespace

namespace {

using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

// The fused loss's count of hits (Note [Fused cross-entropy]) for the output and targets it
// was computed on, which `correct` takes instead of reading the logits again (an argmax over
// GPT-2's 3.3e9 logits: 3.6 ms of a step on an H200). Both are held weakly: a count is never
// given for other tensors, nor does it keep the logits alive. Copies of an Objective share it
// (ranks as threads, each with its Trainer): a mutex, and a count taken by another thread's
// loss is simply not found (that `correct` reads the logits).
struct FusedHits {
  std::mutex mutex;
  std::optional<WeakImpl> output, targets;
  at::Tensor count;

  void set(const at::Tensor& out, const at::Tensor& t, at::Tensor c) {
    std::lock_guard<std::mutex> lock(mutex);
    output.emplace(out.getIntrusivePtr());
    targets.emplace(t.getIntrusivePtr());
    count = std::move(c);
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mutex);
    output.reset(), targets.reset();
    count = at::Tensor();
  }
  /// The count for exactly these tensors (once), or an undefined tensor.
  at::Tensor take(const at::Tensor& out, const at::Tensor& t) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!output || output->lock().get() != out.unsafeGetTensorImpl() ||
        targets->lock().get() != t.unsafeGetTensorImpl())
      return at::Tensor();
    output.reset(), targets.reset();
    return std::exchange(count, at::Tensor());
  }
};

}  // namespace

Objective Objective::classification(FusedLoss fused) {
  Objective o;
  auto last = std::make_shared<FusedHits>();
  // Classes (B, C) or next tokens (B, T, V): the mean over every prediction. A padded
  // vocabulary's (B, T, V) view flattens to (B·T, V) rows without a copy.
  o.loss = [fused, last](const at::Tensor& logits, const at::Tensor& targets) {
    const at::Tensor rows = logits.reshape({-1, logits.size(-1)});
    if (!use_fused_loss(fused, logits)) {
      last->clear();
      return torch::nn::functional::cross_entropy(rows, targets.reshape({-1}));
    }
    // The fused loss reads rows of contiguous elements (a scripted module's transposed product
    // may give others: a copy then, as the eager loss would read them).
    auto [loss, count] =
        fused_cross_entropy_and_hits(rows.stride(1) == 1 ? rows : rows.contiguous(), targets.reshape({-1}));
    last->set(logits, targets, count);
    return loss;
  };
  o.correct = [last](const at::Tensor& logits, const at::Tensor& targets) {
    at::Tensor count = last->take(logits, targets);
    return count.defined() ? count : logits.argmax(-1).eq(targets).sum();
  };
  o.check_targets = [](const at::Tensor& targets) {
    if (targets.numel() == 0 || targets.is_floating_point()) return;  // the fit check names float targets
    const int64_t lowest = targets.min().item<int64_t>();             // on the host
    DDP_USAGE_CHECK(
        lowest >= 0, "a target of ", lowest, lowest == -100 ? " (PyTorch's ignore_index)" : "",
        ": ddptrain's cross-entropy counts every target, as its mean and accuracy do, and ignores "
        "none; give class or token ids from 0, or (a library program) "
        "Objective::classification_ignoring(",
        lowest, "), train/trainable.h");
  };
  return o;
}

Objective Objective::classification_ignoring(int64_t ignore_index) {
  Objective o;
  auto counted = [ignore_index](const at::Tensor& targets) { return targets.reshape({-1}).ne(ignore_index); };
  o.loss = [ignore_index, counted](const at::Tensor& logits, const at::Tensor& targets) {
    namespace F = torch::nn::functional;
    const at::Tensor sum =
        F::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}),
                         F::CrossEntropyFuncOptions().ignore_index(ignore_index).reduction(torch::kSum));
    return sum / counted(targets).sum().clamp_min(1);
  };
  o.correct = [counted](const at::Tensor& logits, const at::Tensor& targets) {
    const at::Tensor hits = logits.reshape({-1, logits.size(-1)}).argmax(-1).eq(targets.reshape({-1}));
    return hits.logical_and(counted(targets)).sum();
  };
  o.count = [counted](const at::Tensor&, const at::Tensor& targets) { return counted(targets).sum(); };
  o.check_targets = [ignore_index](const at::Tensor& targets) {
    if (targets.numel() == 0 || targets.is_floating_point()) return;  // the fit check names float targets
    const at::Tensor negative = targets.lt(0).logical_and(targets.ne(ignore_index));
    if (!negative.any().item<bool>()) return;  // on the host
    DDP_USAGE_CHECK(false, "a target of ", targets.masked_select(negative)[0].item<int64_t>(),
                    ": give class or token ids from 0, or ", ignore_index, " for a target the loss ignores");
  };
  return o;
}

Objective Objective::mean_squared_error() {
  Objective o;
  o.loss = [](const at::Tensor& output, const at::Tensor& targets) {
    TORCH_CHECK(output.sizes() == targets.sizes(), "mse: the output's shape ", output.sizes(),
                " is not the targets' ", targets.sizes());
    return torch::nn::functional::mse_loss(output, targets);
  };
  return o;
}

ForwardResult forward_loss(DistributedDataParallel& ddp, const Trainable& model, const Objective& objective,
                           const Precision& precision, c10::Device device, const at::Tensor& inputs,
                           const at::Tensor& targets, bool sync_buffers) {
  if (sync_buffers) ddp.sync_buffers();
  compat::AutocastGuard autocast(device.type(), precision.dtype, precision.autocast);
  ForwardResult r;
  r.output = model.forward(inputs);
  r.loss = objective.loss(r.output, targets);
  return r;
}

void backward(DistributedDataParallel& ddp, GradScaler& scaler, const at::Tensor& loss, int64_t group_size,
              bool reduce) {
  std::optional<DistributedDataParallel::NoSyncGuard> local;
  if (!reduce) local.emplace(ddp);
  scaler.scale(loss / static_cast<double>(group_size)).backward();
}

namespace {

// Unscale and clip the gradients the step will read: the parameters' (stages 0 and 1), or this
// rank's shards (Note [ZeRO stage 2]: the inf/NaN flag and the norm come from every rank).
void prepare_gradients(TrainState& state, double clip_grad_norm) {
  ShardedOptimizer* z = state.sharded;
  if (z && z->shards_gradients()) {
    z->attach_gradients();
    state.scaler.unscale(z->attached_gradients());
    state.scaler.agree(z->context());
    if (clip_grad_norm > 0) state.last_grad_norm = z->clip_grad_norm(clip_grad_norm);
    return;
  }
  state.scaler.unscale(state.optimizer);
  if (clip_grad_norm <= 0) return;
  // The norm of the module's parameters the optimizer steps (and the scaler unscaled), as stage
  // 2's shards give it: a trainable parameter the optimizer does not hold keeps its gradient
  // scaled and growing; one outside the module has a gradient of its rank alone, and a norm
  // counting it would differ between the ranks (Trainer warns of both).
  std::unordered_set<const void*> optimized;
  for (const auto& group : state.optimizer.param_groups())
    for (const auto& p : group.params()) optimized.insert(p.unsafeGetTensorImpl());
  std::vector<at::Tensor> stepped;
  for (const auto& p : state.module.parameters())  // a tensor registered twice counts once
    if (optimized.erase(p.unsafeGetTensorImpl()) != 0) stepped.push_back(p);
  state.last_grad_norm = ddptrain::clip_grad_norm(stepped, clip_grad_norm);
}

}  // namespace

bool optimizer_step(TrainState& state, double clip_grad_norm) {
  prepare_gradients(state, clip_grad_norm);
  state.grad_bytes =
      0;  // the gradients' own memory: a view (a bucket's, gradient_as_bucket_view) is the bucket's
  std::unordered_set<const void*> counted;  // a tensor registered twice counts once
  for (const auto& p : state.module.parameters())
    if (p.grad().defined() && !p.grad().is_view() && counted.insert(p.unsafeGetTensorImpl()).second)
      state.grad_bytes += static_cast<int64_t>(p.grad().nbytes());
  const bool stepped = state.sharded ? state.scaler.step(state.optimizer, [&] { state.sharded->step(); })
                                     : state.scaler.step(state.optimizer);
  state.scaler.update();
  if (!stepped) ++state.skipped_steps;
  zero_grad_set_to_none(state.optimizer);
  ++state.global_step;
  ++state.run_steps;
  return stepped;
}

void zero_grad_set_to_none(torch::optim::Optimizer& opt) {
  for (auto& group : opt.param_groups())
    for (auto& p : group.params()) p.mutable_grad().reset();
}

}  // namespace ddptrain
