#include "train/stop_vote.h"

#include <c10/core/impl/VirtualGuardImpl.h>

#include "util/torch_compat.h"

namespace ddptrain {

StopVote::StopVote(const DistContext& ctx, std::function<int()> stop_requested)
    : ctx_(ctx),
      requested_(std::move(stop_requested)),
      votes_{at::zeros({ctx.world_size()}, at::TensorOptions().dtype(at::kInt).device(ctx.device()))} {
  if (ctx.device().is_cuda()) {
    host_copy_ = at::zeros({ctx.world_size()}, at::TensorOptions().dtype(at::kInt).pinned_memory(true));
    copied_.emplace(c10::DeviceType::CUDA);
  }
}

namespace {

// The lowest rank's request among every rank's signal (0 where none).
StopRequest first_request(const int* signals, int world) {
  for (int r = 0; r < world; ++r)
    if (signals[r] != 0) return {signals[r], r};
  return {};
}

}  // namespace

StopRequest StopVote::local_request() const {
  const int sig = local_signal();
  return sig != 0 ? StopRequest{sig, ctx_.rank()} : StopRequest{};
}

void StopVote::start_vote() {
  votes_[0].zero_();
  votes_[0][ctx_.rank()].fill_(local_signal());
  pending_ = ctx_.all_reduce_sum_async(votes_, "stop vote");
  if (!copied_) return;
  // CUDA: the wait orders the current stream after the all-reduce (the host does not wait); the
  // copy and the event follow on that stream.
  ctx_.wait(pending_, "stop-signal all_reduce");
  pending_.reset();
  host_copy_.copy_(votes_[0], /*non_blocking=*/true);
  const c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
  copied_->record(cuda.getStream(ctx_.device()));
  copy_pending_ = true;
}

// The vote started at the previous step: every rank's signal (Note [Agreed stop]).
StopRequest StopVote::read_vote() {
  const int world = ctx_.world_size();
  if (copied_) {
    if (!copy_pending_) return {};
    compat::synchronize_event(*copied_);  // the previous step's work and the copy, not what was queued since
    copy_pending_ = false;
    return first_request(host_copy_.data_ptr<int>(), world);
  }
  if (!pending_) return {};
  ctx_.wait(pending_, "stop-signal all_reduce");  // Gloo: the sum is in host memory when this returns
  pending_.reset();
  return first_request(votes_[0].data_ptr<int>(), world);
}

StopRequest StopVote::agreed_now() {
  if (ctx_.world_size() == 1) return local_request();
  start_vote();
  return read_vote();
}

StopRequest StopVote::agreed() {
  if (ctx_.world_size() == 1) return local_request();
  const StopRequest stop = read_vote();
  if (!stop) start_vote();
  return stop;
}

StopRequest StopVote::drain() {
  if (ctx_.world_size() == 1) return local_request();
  return read_vote();  // the pending vote, if any; none is started after it
}

}  // namespace ddptrain
