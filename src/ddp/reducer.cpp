#include "ddp/reducer.h"

#include <chrono>

#include <ATen/ScalarOps.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "ddp/bucket_assignment.h"
#include "util/error.h"

namespace ddptrain {
namespace {

struct ReadyHook : torch::autograd::FunctionPostHook {
  explicit ReadyHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    fn_();
    return outputs;
  }
  std::function<void()> fn_;
};

at::ScalarType wire_dtype(CommHook h) { return h == CommHook::kFp16 ? at::kHalf : at::kBFloat16; }

}  // namespace

Reducer::Reducer(std::vector<at::Tensor> params, std::vector<std::string> names, const DistContext& ctx,
                 ReducerOptions opts)
    : params_(std::move(params)), names_(std::move(names)), ctx_(ctx), opts_(opts) {
  DDP_ASSERT(params_.size() == names_.size());
  wait_clock_ = std::make_unique<WaitClock>(params_.empty() ? c10::Device(c10::kCPU) : params_[0].device());
  std::vector<BucketParam> bp;
  for (auto& p : params_)
    bp.push_back({p.numel(), static_cast<int64_t>(p.element_size()),
                  std::string(c10::toString(p.scalar_type())) + "@" + p.device().str()});
  buckets_ = opts_.buckets.empty() ? assign_buckets(bp, opts_.bucket_cap_bytes, opts_.first_bucket_bytes)
                                   : opts_.buckets;
  bucket_of_.resize(params_.size());
  offset_of_.resize(params_.size());
  const int64_t world = ctx_.world_size();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    int64_t n = 0;
    for (size_t i : buckets_[b]) {
      bucket_of_[i] = b;
      offset_of_[i] = n;
      n += params_[i].numel();
    }
    // Under shard_gradients padded to equal shards, as ddp/shard_layout.h cuts them.
    const int64_t padded = opts_.shard_gradients ? (n + world - 1) / world * world : n;
    flat_numel_.push_back(padded);
    // Under shard_gradients the full bucket exists only while a backward fills it (ensure_flat):
    // a rank never holds the whole model's gradients, not even before its first step.
    flat_.push_back(opts_.shard_gradients ? at::Tensor()
                                          : at::zeros({padded}, params_[buckets_[b][0]].options()));
    // This rank's shard of the averaged gradient: allocated by the first backward that fills it
    // (ensure_shard), so building and loading a model holds no gradient memory.
    if (opts_.shard_gradients) shard_.emplace_back();
  }
  if (opts_.shard_gradients && !ctx_.reduce_scatters())
    ctx_.log().info(str("zero_stage 2: backend ", ctx_.backend_name(),
                        " of this LibTorch has no reduce_scatter: each ",
                        "bucket is all-reduced and this rank keeps its shard (same numbers, more traffic)"));
  wire_ = flat_;
  works_.resize(buckets_.size());
  ready_.assign(params_.size(), 0);
  for (const auto& b : buckets_) local_pending_.push_back(b.size());
  reset_iteration();

  if (opts_.comm_hook != CommHook::kNone && !ctx_.reduces(wire_dtype(opts_.comm_hook)))
    ctx_.log().warn(str("comm_hook=", word(opts_.comm_hook), ": backend ", ctx_.backend_name(),
                        " of this LibTorch cannot all-reduce ", c10::toString(wire_dtype(opts_.comm_hook)),
                        "; gradients are rounded to it but sent as ",
                        "fp32 (same numerics, no bandwidth saved); fp16 is reduced natively"));
  for (size_t i = 0; i < params_.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[i]);
    DDP_ASSERT(acc, "parameter ", names_[i], " is not a leaf that requires grad");
    hook_keys_.push_back(acc->add_post_hook(std::make_unique<ReadyHook>([this, i] { on_grad_ready(i); })));
    grad_accumulators_.push_back(std::move(acc));
  }
}

Reducer::~Reducer() {
  for (size_t i = 0; i < grad_accumulators_.size(); ++i) grad_accumulators_[i]->del_post_hook(hook_keys_[i]);
}

ReducerStats Reducer::take_stats() {
  ReducerStats s = stats_;
  s.wait_s = wait_clock_->take_seconds();  // See Note [Communication wait on a GPU].
  stats_ = {};
  return s;
}

// A parameter's place in its bucket, in the parameter's own layout (as c10d's bucket views): a
// channels-last parameter's gradient stays channels-last, and a bucket holds its parameters in
// their memory order, the order ZeRO's shards cut (ddp/shard_layout.h).
at::Tensor Reducer::slot(size_t i) const {
  const at::Tensor& p = params_[i];
  const at::Tensor& f = flat_[bucket_of_[i]];
  if (p.is_non_overlapping_and_dense())
    return f.as_strided(p.sizes(), p.strides(), f.storage_offset() + offset_of_[i]);
  return f.narrow(0, offset_of_[i], p.numel()).view_as(p);
}

at::Tensor& Reducer::ensure_flat(size_t b) {
  if (!flat_[b].defined()) {  // freed after the last step under shard_gradients
    flat_[b] = at::zeros({flat_numel_[b]}, params_[buckets_[b][0]].options());
    wire_[b] = flat_[b];
  }
  return flat_[b];
}

at::Tensor& Reducer::ensure_shard(size_t b) {
  if (!shard_[b].defined())
    shard_[b] = at::zeros({flat_numel_[b] / ctx_.world_size()}, params_[buckets_[b][0]].options());
  return shard_[b];
}

int64_t Reducer::bucket_bytes() const {
  int64_t n = 0;
  for (const auto& f : flat_)
    if (f.defined()) n += static_cast<int64_t>(f.nbytes());
  for (const auto& s : shard_)
    if (s.defined()) n += static_cast<int64_t>(s.nbytes());
  return n;
}

void Reducer::reset_iteration() {
  std::fill(ready_.begin(), ready_.end(), 0);
  pending_.clear();
  for (const auto& b : buckets_) pending_.push_back(b.size());
  next_launch_ = 0;
  next_finish_ = 0;
  armed_ = false;
}

void Reducer::reset_local_counts() {
  for (size_t b = 0; b < buckets_.size(); ++b) local_pending_[b] = buckets_[b].size();
  local_armed_ = false;
}

// Under no_sync only on_bucket_grads_ needs to know when a bucket's gradients are complete.
void Reducer::count_local(size_t i) {
  const size_t b = bucket_of_[i];
  if (--local_pending_[b] > 0) return;
  local_pending_[b] = buckets_[b].size();
  on_bucket_grads_(b);
}

void Reducer::on_grad_ready(size_t i) {
  if (!sync_) {  // See Note [no_sync and accumulation].
    if (!on_bucket_grads_) return;
    if (!local_armed_) {  // the counts start afresh at every backward: a parameter may get none
      local_armed_ = true;
      torch::autograd::Engine::get_default_engine().queue_callback([this] { reset_local_counts(); });
    }
    count_local(i);
    return;
  }
  if (!armed_) {
    armed_ = true;
    torch::autograd::Engine::get_default_engine().queue_callback([this] { finalize(); });
  }
  DDP_CHECK(!ready_[i], "parameter '", names_[i], "' received its gradient twice in one backward pass; ",
            "a parameter may take part in the graph several times, but backward must run once per step");
  ready_[i] = 1;
  ensure_flat(bucket_of_[i]);
  into_bucket(i, params_[i].mutable_grad());
  if (--pending_[bucket_of_[i]] > 0) return;
  if (on_bucket_grads_) on_bucket_grads_(bucket_of_[i]);
  if (opts_.overlap) launch_ready_buckets();
}

void Reducer::into_bucket(size_t i, at::Tensor& grad) {
  torch::NoGradGuard no_grad;
  at::Tensor view = slot(i);
  const bool divides = opts_.comm_hook == CommHook::kNone;  // a hook divides its compressed copy
  if (!grad.defined()) {
    view.zero_();  // contributes zero; finalize() gives it the mean where another rank used it
    return;
  }
  if (grad.data_ptr() == view.data_ptr()) {
    if (divides) view.div_(ctx_.world_size());  // the bucket's view already (gradient_as_bucket_view)
  } else if (divides) {
    at::mul_out(view, grad, at::native::wrapped_scalar_tensor(1.0 / ctx_.world_size()));
  } else {
    view.copy_(grad);
  }
  // gradient_as_bucket_view: the gradient becomes a view into the bucket, nothing is copied back
  // after the all-reduce; shard_gradients: the full gradient is not kept, its bucket has it.
  if (opts_.gradient_as_bucket_view)
    grad = view;
  else if (opts_.shard_gradients)
    grad.reset();
}

std::vector<char> Reducer::gradient_unused_by_all(const std::vector<char>& used) const {
  const std::vector<float> flags(used.begin(), used.end());  // 1: used here
  std::vector<at::Tensor> t{at::tensor(flags).to(params_.front().device())};
  ctx_.all_reduce_sum(t, "find_unused_parameters: which parameters any rank used");
  const at::Tensor any = t[0].cpu().contiguous();
  const float* counts = any.data_ptr<float>();
  std::vector<char> out(used.size());
  for (size_t i = 0; i < used.size(); ++i) out[i] = counts[i] == 0.0f;
  return out;
}

void Reducer::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && pending_[next_launch_] == 0) launch(next_launch_++);
}

void Reducer::launch(size_t b) {
  torch::NoGradGuard no_grad;
  // Note [ZeRO stage 2]: the full buckets in flight are bounded.
  while (opts_.shard_gradients && opts_.shard_buckets_in_flight > 0 &&
         b - next_finish_ >= opts_.shard_buckets_in_flight)
    finish_next();
  if (opts_.shard_gradients && ctx_.reduce_scatters()) {
    works_[b] = ctx_.reduce_scatter_sum_async(flat_[b], ensure_shard(b), str("gradient bucket ", b));
    ++stats_.allreduces;
    stats_.bytes += static_cast<int64_t>(flat_[b].nbytes());
    return;
  }
  if (opts_.comm_hook != CommHook::kNone) {
    // As PyTorch's fp16/bf16 compress hooks (_compress_hook): cast, then divide in 16 bits
    // (a value beyond fp16's range is inf there, which the loss scaler then sees), then reduce
    // the compressed copy.
    const at::ScalarType dt = wire_dtype(opts_.comm_hook);
    wire_[b] = flat_[b].to(dt).div_(ctx_.world_size());
    // A backend without 16-bit reduction for this dtype reduces the rounded values in fp32:
    // same numerics as the hook, no bandwidth saved (the constructor logs it).
    if (!ctx_.reduces(dt)) wire_[b] = wire_[b].to(flat_[b].scalar_type());
  }
  std::vector<at::Tensor> t{wire_[b]};
  works_[b] = ctx_.all_reduce_sum_async(t, str("gradient bucket ", b));
  ++stats_.allreduces;
  stats_.bytes += static_cast<int64_t>(wire_[b].nbytes());
}

// Bucket b's reduced sum is the mean (Note [The mean before the sum]): a comm hook's copy goes
// back into the bucket; under shard_gradients this rank's shard is kept and the full bucket is
// released until the next backward.
void Reducer::finish_bucket(size_t b) {
  if (opts_.shard_gradients) {
    const int64_t n = ensure_shard(b).numel();
    if (!ctx_.reduce_scatters()) shard_[b].copy_(flat_[b].narrow(0, ctx_.rank() * n, n));
    flat_[b] = at::Tensor();
    wire_[b] = at::Tensor();
    return;
  }
  if (opts_.comm_hook != CommHook::kNone) flat_[b].copy_(wire_[b]);
}

void Reducer::finish_next() {
  wait_clock_->start();
  ctx_.wait(works_[next_finish_], "gradient all_reduce");  // only now may the bucket be touched
  works_[next_finish_].reset();
  finish_bucket(next_finish_);
  ++next_finish_;
  wait_clock_->stop();
}

void Reducer::finalize() {
  for (size_t b = next_finish_; b < buckets_.size(); ++b) ensure_flat(b);  // finished ones are released
  // Parameters that got no gradient in this backward. find_unused_parameters, as PyTorch's
  // reducer: a gradient accumulated before (no_sync micro-batches) is this rank's contribution,
  // else zero; a parameter no rank used (in this backward or before it) keeps its gradient as it
  // was, None staying None, so that the optimizer skips it (gradient_unused_by_all, below).
  std::string missing;
  size_t n_missing = 0;
  std::vector<char> used(ready_.begin(), ready_.end());
  for (size_t i = 0; i < params_.size(); ++i) {
    if (ready_[i]) continue;
    if (opts_.find_unused_parameters) {
      at::Tensor& grad = params_[i].mutable_grad();
      used[i] = grad.defined();
      into_bucket(i, grad);
      ready_[i] = 1;
      --pending_[bucket_of_[i]];
      continue;
    }
    if (n_missing++ < 5) missing += (missing.empty() ? "'" : ", '") + names_[i] + "'";
  }
  if (n_missing > 0) {
    reset_iteration();
    throw Error(str("[rank ", ctx_.rank(), "/", ctx_.world_size(), "] ", n_missing,
                    " parameter(s) received no gradient in this backward pass: ", missing,
                    n_missing > 5 ? ", ..." : "",
                    ". DDP must reduce every parameter in every step (the 'Expected to have finished "
                    "reduction in the prior iteration' case in PyTorch). Remedy: make every parameter "
                    "take part in the loss, or set find_unused_parameters "
                    "(TrainerOptions::ddp.find_unused_parameters; ddptrain train --find_unused_parameters)"));
  }
  launch_ready_buckets();
  DDP_ASSERT(next_launch_ == buckets_.size(), "buckets left unlaunched");
  torch::NoGradGuard no_grad;
  while (next_finish_ < buckets_.size()) finish_next();
  ++stats_.syncs;
  const std::vector<char> unused_by_all =
      opts_.find_unused_parameters ? gradient_unused_by_all(used) : std::vector<char>(params_.size(), 0);
  if (opts_.shard_gradients) {  // the gradients are the shards; the unused the optimizer skips
    shard_unused_ = unused_by_all;
    return reset_iteration();
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (unused_by_all[i]) continue;
    at::Tensor& grad = params_[i].mutable_grad();
    at::Tensor view = slot(i);
    if (opts_.gradient_as_bucket_view)
      grad = view;
    else if (grad.defined())
      grad.copy_(view);
    else
      grad = view.clone();
  }
  reset_iteration();
}

}  // namespace ddptrain
