#include "ddp/bucket_assignment.h"

#include <map>

#include "util/error.h"

namespace ddptrain {

std::vector<std::vector<size_t>> assign_buckets(const std::vector<BucketParam>& params, size_t cap_bytes,
                                                size_t first_cap_bytes) {
  DDP_ASSERT(cap_bytes > 0 && first_cap_bytes > 0);
  struct Open {
    std::vector<size_t> indices;
    size_t bytes = 0;
  };
  std::map<std::string, Open> open;  // one open bucket per dtype/device group
  std::vector<std::vector<size_t>> done;
  for (size_t k = params.size(); k-- > 0;) {
    const BucketParam& p = params[k];
    Open& b = open[p.group];
    b.indices.push_back(k);
    b.bytes += static_cast<size_t>(p.numel * p.element_size);
    size_t cap = done.empty() ? first_cap_bytes : cap_bytes;
    if (b.bytes >= cap) {
      done.push_back(std::move(b.indices));
      open.erase(p.group);
    }
  }
  // Leftover partial buckets, ordered by their first (highest) index so that the order is
  // a function of the parameters alone, identical on every rank.
  std::vector<std::vector<size_t>> rest;
  for (auto& [group, b] : open)
    if (!b.indices.empty()) rest.push_back(std::move(b.indices));
  std::sort(rest.begin(), rest.end(), [](const auto& a, const auto& b) { return a[0] > b[0]; });
  for (auto& r : rest) done.push_back(std::move(r));
  return done;
}

}  // namespace ddptrain
