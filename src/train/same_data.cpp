#include "train/same_data.h"

#include "dist/every_rank.h"
#include "util/error.h"
#include "util/fnv.h"

namespace ddptrain {
namespace {

// size, channels, height, width, classes, block size, class names' hash, files' hash (size -1:
// no split)
constexpr int kSplitFields = 8;

std::vector<int64_t> split_fields(const Dataset* d) {
  if (d == nullptr) return {-1, 0, 0, 0, 0, 0, 0, 0};
  const DatasetShape s = d->shape();
  const auto names = static_cast<int64_t>(d->label_names_hash());
  const auto files = static_cast<int64_t>(d->files_hash());
  return {d->size(), s.channels, s.height, s.width, s.num_classes, s.block_size, names, files};
}

std::string described(const int64_t* f) {
  if (f[0] < 0) return "no such split";
  const std::string names = f[6] != 0 ? str(", class names ", hex16(static_cast<uint64_t>(f[6]))) : "";
  const std::string files = f[7] != 0 ? str(", files ", hex16(static_cast<uint64_t>(f[7]))) : "";
  if (f[5] > 0) return str(f[0], " samples of ", f[5], " tokens (vocabulary ", f[4], ")", files);
  return str(f[0], " samples of shape (", f[1], ", ", f[2], ", ", f[3], "), ", f[4], " classes", names,
             files);
}

}  // namespace

void check_ranks_hold_the_same_data(const DistContext& ctx, const std::vector<NamedSplit>& splits) {
  if (ctx.world_size() == 1 || splits.empty()) return;
  std::vector<int64_t> mine;
  for (const auto& [name, data] : splits)
    for (const int64_t v : split_fields(data)) mine.push_back(v);
  const auto all =
      gathered_values(ctx, mine, "each rank's data sizes (Note [Every rank holds the same data])");
  for (size_t s = 0; s < splits.size(); ++s) {
    const int64_t* first = all[0].data() + s * kSplitFields;
    std::string differ;
    for (size_t r = 1; r < all.size(); ++r) {
      const int64_t* other = all[r].data() + s * kSplitFields;
      if (!std::equal(first, first + kSplitFields, other))
        differ += str(differ.empty() ? "" : "; ", "rank ", r, ": ", described(other));
    }
    DDP_USAGE_CHECK(differ.empty(), "the ranks hold different ", splits[s].first,
                    " data: rank 0: ", described(first), "; ", differ,
                    ". Each rank reads its own copy: give every node the same files (is a copy still ",
                    "being synced? the same data flags on every node?) and start again");
  }
}

DataSplits open_data_on_every_rank(const DistContext& ctx, const std::function<DataSplits()>& open) {
  DataSplits data;
  on_every_rank(
      ctx, "the ranks' opening of the data (Note [Every rank holds the same data])", [&] { data = open(); },
      [](int64_t n) {
        return ranks_could_not(n, "open the data",
                               ": every rank reads its own copy, so each node needs the same files");
      });
  check_ranks_hold_the_same_data(ctx, {{"training", data.train.get()}, {"test", data.test.get()}});
  return data;
}

}  // namespace ddptrain
