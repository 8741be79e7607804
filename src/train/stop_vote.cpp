#include "train/stop_vote.h"

namespace ddptrain {

StopVote::StopVote(const DistContext& ctx, std::function<int()> stop_requested)
    : ctx_(ctx),
      requested_(std::move(stop_requested)),
      votes_{at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(ctx.device()))} {}

bool StopVote::agreed() {
  if (ctx_.world_size() == 1) return local_signal() != 0;
  bool stop_now = false;
  if (pending_) {
    ctx_.wait(pending_, "stop-signal all_reduce");
    pending_.reset();
    stop_now = votes_[0].item<int>() > 0;
  }
  if (!stop_now) {
    votes_[0].fill_(local_signal() != 0 ? 1 : 0);
    pending_ = ctx_.all_reduce_sum_async(votes_, "stop vote");
  }
  return stop_now;
}

void StopVote::drain() {
  if (!pending_) return;
  ctx_.wait(pending_, "stop-signal all_reduce");
  pending_.reset();
}

}  // namespace ddptrain
