#include "dist/every_rank.h"

#include <exception>

#include "util/error.h"
#include "util/strings.h"

namespace ddptrain {

std::vector<int64_t> on_every_rank(const DistContext& ctx, const char* what,
                                   const std::function<void()>& work, const FailedElsewhere& failed_elsewhere,
                                   std::vector<int64_t> sums) {
  std::exception_ptr failed;
  bool usage = false;  // the failure is the user's to fix (exit 2), else the machine's (exit 1)
  try {
    work();
  } catch (const UsageError&) {
    failed = std::current_exception();
    usage = true;
  } catch (...) {
    failed = std::current_exception();
  }
  if (ctx.world_size() > 1) {
    std::vector<int64_t> mine{failed ? 1 : 0, usage ? 1 : 0};
    mine.insert(mine.end(), sums.begin(), sums.end());
    std::vector<at::Tensor> t{at::tensor(mine, at::kLong)};
    ctx.all_reduce_sum(t, what);
    const int64_t* all = t[0].data_ptr<int64_t>();
    std::copy(all + 2, all + 2 + sums.size(), sums.begin());
    if (!failed && all[0] > 0) {
      if (all[1] > 0) throw UsageError(failed_elsewhere(all[0]));
      throw Error(failed_elsewhere(all[0]));
    }
  }
  if (failed) std::rethrow_exception(failed);
  return sums;
}

std::string ranks_could_not(int64_t failed_ranks, const std::string& what, const std::string& then) {
  return str(failed_ranks, failed_ranks == 1 ? " rank" : " ranks", " could not ", what, " (its log says why)",
             then);
}

std::vector<std::vector<int64_t>> gathered_values(const DistContext& ctx, const std::vector<int64_t>& mine,
                                                  const char* what) {
  const at::Tensor t = at::tensor(mine, at::kLong);
  std::vector<at::Tensor> per_rank(static_cast<size_t>(ctx.world_size()));
  for (auto& p : per_rank) p = at::empty_like(t);
  ctx.all_gather(t, per_rank, what);
  std::vector<std::vector<int64_t>> out;
  for (const auto& p : per_rank) {
    const at::Tensor c = p.cpu().contiguous();
    out.emplace_back(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
  }
  return out;
}

}  // namespace ddptrain
