// DistributedSampler: the indices a rank reads in an epoch, identical to PyTorch's
// torch.utils.data.DistributedSampler for every (length, world, rank, shuffle, seed, epoch,
// drop_last) — checked against golden indices made by Python (tests/golden/sampler.txt).
// Note [Sampler equivalence]: PyTorch permutes with torch.randperm(n) from a CPU generator
// seeded with seed + epoch, pads by repeating the list from its start (not drop_last) or
// truncates (drop_last), then takes every world_size-th index from rank. We call the same
// ATen randperm kernel with the same generator, so the permutation is bitwise the same.
// LibTorch's own DistributedRandomSampler is NOT equivalent and must not be used.
#pragma once

#include <cstdint>
#include <vector>

namespace ddptrain {

struct SamplerOptions {
  int64_t dataset_len = 0;
  int world_size = 1;
  int rank = 0;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
};

class DistributedSampler {
 public:
  explicit DistributedSampler(SamplerOptions opts);
  /// As PyTorch's set_epoch: the permutation of the next indices() depends on seed + epoch.
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  /// Indices per rank per epoch (PyTorch's num_samples).
  int64_t num_samples() const { return num_samples_; }
  /// This rank's indices for the current epoch.
  std::vector<int64_t> indices() const;
  /// Every rank's, in one order: rank r reads positions r, r + world, ... (padded or cut
  /// to num_samples() * world; Note [Resume at another world size]).
  std::vector<int64_t> global_order() const;

 private:
  SamplerOptions opts_;
  int64_t epoch_ = 0;
  int64_t num_samples_ = 0;
  int64_t total_size_ = 0;
};

}  // namespace ddptrain
