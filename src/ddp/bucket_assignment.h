// Bucket assignment: which gradients are all-reduced together, as a pure function.
// Note [Bucket order]: gradients become ready roughly in reverse registration order during
// backward, so buckets are filled from the last parameter to the first. The assignment
// depends only on parameter order, sizes and dtypes — never on timing — so every rank builds
// identical buckets and issues identical collectives (DESIGN.md invariant 1). A bucket holds
// one dtype/device only (it is one flat tensor). The first bucket has its own, usually
// smaller, cap so that communication starts early in backward.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ddptrain {

struct BucketParam {
  int64_t numel = 0;
  int64_t element_size = 4;  // bytes
  std::string group;         // dtype + device; parameters of different groups never share
};

/// Returns buckets of parameter indices, in launch order. Each bucket's indices are in
/// reverse registration order. A bucket is closed once it reaches its cap (the first bucket:
/// first_cap_bytes), so a single parameter larger than the cap gets a bucket of its own.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<BucketParam>& params, size_t cap_bytes,
                                                size_t first_cap_bytes);

}  // namespace ddptrain
