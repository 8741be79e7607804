#include "ddp/ddp.h"

#include <map>

#include "ddp/bucket_assignment.h"
#include "util/error.h"

namespace ddptrain {

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 const DistContext& ctx, DdpOptions opts)
    : module_(std::move(module)), ctx_(ctx), opts_(opts) {
  for (auto& p : module_->parameters())
    if (p.requires_grad()) params_.push_back(p);
  for (auto& b : module_->buffers()) buffers_.push_back(b);

  std::vector<BucketParam> bp;
  for (auto& p : params_)
    bp.push_back({p.numel(), static_cast<int64_t>(p.element_size()),
                  std::string(c10::toString(p.scalar_type())) + "@" + p.device().str()});
  buckets_ = assign_buckets(bp, opts_.bucket_cap_bytes, opts_.first_bucket_bytes);
  for (const auto& b : buckets_) {
    int64_t n = 0;
    for (size_t i : b) n += params_[i].numel();
    flat_.push_back(at::empty({n}, params_[b[0]].options()));
  }

  // Every rank starts from rank 0's weights, whatever its own initialisation did.
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> state = params_;
  state.insert(state.end(), buffers_.begin(), buffers_.end());
  for (auto& t : state) {
    std::vector<at::Tensor> one{t};
    ctx_.broadcast(one, 0);
  }
}

void DistributedDataParallel::sync_buffers() {
  if (!opts_.broadcast_buffers || ctx_.world_size() == 1 || buffers_.empty()) return;
  torch::NoGradGuard no_grad;
  // One broadcast per dtype (float statistics, int64 counters), in a fixed dtype order.
  std::map<at::ScalarType, std::vector<at::Tensor*>> by_dtype;
  for (auto& b : buffers_) by_dtype[b.scalar_type()].push_back(&b);
  for (auto& [dtype, group] : by_dtype) {
    std::vector<at::Tensor> parts;
    for (auto* b : group) parts.push_back(b->reshape(-1));
    std::vector<at::Tensor> flat{torch::cat(parts)};
    ctx_.broadcast(flat, 0);
    int64_t off = 0;
    for (auto* b : group) {
      b->copy_(flat[0].narrow(0, off, b->numel()).view_as(*b));
      off += b->numel();
    }
  }
}

void DistributedDataParallel::sync_gradients() {
  if (ctx_.world_size() == 1) return;
  torch::NoGradGuard no_grad;
  // Launch every bucket, then wait in bucket order; Gloo works on several buckets at once.
  std::vector<compat::WorkHandle> works;
  std::vector<std::vector<at::Tensor>> holders(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    int64_t off = 0;
    for (size_t i : buckets_[b]) {
      const at::Tensor& p = params_[i];
      auto slot = flat_[b].narrow(0, off, p.numel());
      if (p.grad().defined())
        slot.copy_(p.grad().reshape(-1));
      else
        slot.zero_();
      off += p.numel();
    }
    holders[b] = {flat_[b]};
    works.push_back(ctx_.all_reduce_sum_async(holders[b]));
  }
  const double inv_world = 1.0 / ctx_.world_size();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    ctx_.wait(works[b], "gradient all_reduce");  // never read a bucket before its Work is done
    flat_[b].mul_(inv_world);
    int64_t off = 0;
    for (size_t i : buckets_[b]) {
      at::Tensor& p = params_[i];
      auto slot = flat_[b].narrow(0, off, p.numel()).view_as(p);
      if (p.grad().defined())
        p.mutable_grad().copy_(slot);
      else
        p.mutable_grad() = slot.clone();
      off += p.numel();
    }
  }
}

}  // namespace ddptrain
