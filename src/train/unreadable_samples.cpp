#include "train/unreadable_samples.h"

#include "obs/logger.h"
#include "util/fnv.h"

namespace ddptrain {
namespace {

// The hash (the same on every rank) of a report's sample: the name before its first ": "
// (Dataset::take_skipped's "name: reason"), so two ranks whose decoders failed the same file
// with other words count it once.
int64_t report_hash(const std::string& report) {
  return static_cast<int64_t>(fnv1a(std::string_view(report).substr(0, report.find(": "))));
}

}  // namespace

int64_t UnreadableSamples::count_new(const DistContext& ctx, const std::vector<std::string>& mine,
                                     int64_t reported_anywhere, const char* what) {
  for (const auto& why : mine)
    if (counted_.count(report_hash(why)) == 0) ctx.log().warn(str(what, why));
  if (reported_anywhere <= 0) return 0;
  // Slot 0: how many of this rank's; then its hashes (every rank pads to the sum over ranks).
  at::Tensor local = at::zeros({reported_anywhere + 1}, at::kLong);
  local[0] = static_cast<int64_t>(mine.size());
  for (size_t i = 0; i < mine.size(); ++i) local[static_cast<int64_t>(i) + 1] = report_hash(mine[i]);
  std::vector<at::Tensor> per_rank;
  for (int r = 0; r < ctx.world_size(); ++r) per_rank.push_back(at::empty_like(local));
  ctx.all_gather(local, per_rank, "unreadable-samples all_gather");
  int64_t fresh = 0;
  for (const at::Tensor& t : per_rank) {
    const at::Tensor c = t.cpu();
    const int64_t* h = c.data_ptr<int64_t>();
    for (int64_t i = 1; i <= h[0]; ++i) fresh += counted_.insert(h[i]).second ? 1 : 0;
  }
  return fresh;
}

}  // namespace ddptrain
