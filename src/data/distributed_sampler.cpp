#include "data/distributed_sampler.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "util/error.h"

namespace ddptrain {

DistributedSampler::DistributedSampler(SamplerOptions opts) : opts_(opts) {
  DDP_ASSERT(opts_.world_size >= 1 && opts_.rank >= 0 && opts_.rank < opts_.world_size, "rank ", opts_.rank,
             " world ", opts_.world_size);
  DDP_ASSERT(opts_.dataset_len >= 0);
  const int64_t n = opts_.dataset_len, w = opts_.world_size;
  if (opts_.drop_last && n % w != 0) {
    num_samples_ = (n - w + w - 1) / w;  // ceil((n - w) / w), as PyTorch; n >= w here or 0
    if (n < w) num_samples_ = 0;
  } else {
    num_samples_ = (n + w - 1) / w;
  }
  total_size_ = num_samples_ * w;
}

std::vector<int64_t> DistributedSampler::global_order() const {
  const int64_t n = opts_.dataset_len;
  std::vector<int64_t> all;
  all.reserve(static_cast<size_t>(std::max(n, total_size_)));
  if (opts_.shuffle) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(opts_.seed + static_cast<uint64_t>(epoch_));
    at::Tensor perm = at::randperm(n, gen, at::TensorOptions().dtype(at::kLong));
    const int64_t* p = perm.data_ptr<int64_t>();
    all.assign(p, p + n);
  } else {
    for (int64_t i = 0; i < n; ++i) all.push_back(i);
  }
  if (!opts_.drop_last) {
    // Pad by cycling through the list from its start (PyTorch repeats the whole list as
    // often as needed, then cuts).
    const size_t base = all.size();
    for (size_t k = 0; all.size() < static_cast<size_t>(total_size_) && base > 0; ++k)
      all.push_back(all[k % base]);
  } else {
    all.resize(static_cast<size_t>(total_size_));
  }
  DDP_ASSERT(static_cast<int64_t>(all.size()) == total_size_);
  return all;
}

std::vector<int64_t> DistributedSampler::indices() const {
  const std::vector<int64_t> all = global_order();
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = opts_.rank; i < total_size_; i += opts_.world_size) mine.push_back(all[i]);
  DDP_ASSERT(static_cast<int64_t>(mine.size()) == num_samples_);
  return mine;
}

}  // namespace ddptrain
