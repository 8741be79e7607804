#include "dist/flight_recorder.h"

#include "util/clock.h"

namespace ddptrain {

FlightRecorder::FlightRecorder(size_t capacity) : capacity_(capacity), phase_since_(unix_seconds()) {}

int64_t FlightRecorder::issue(const char* op, const std::string& what,
                              const std::vector<at::Tensor>& tensors) {
  if (!enabled()) return 0;
  Entry e;
  e.op = op;
  e.what = what;
  for (const auto& t : tensors)
    if (t.defined()) e.numel += t.numel();
  if (!tensors.empty() && tensors[0].defined()) e.dtype = c10::toString(tensors[0].scalar_type());
  e.issued = unix_seconds();
  std::lock_guard<std::mutex> lock(mu_);
  e.seq = next_seq_++;
  e.phase = phase_;
  e.step = step_;
  ring_.push_back(std::move(e));
  while (ring_.size() > capacity_) ring_.pop_front();
  return ring_.back().seq;
}

FlightRecorder::Entry* FlightRecorder::find(int64_t seq) {
  for (auto it = ring_.rbegin(); it != ring_.rend(); ++it)
    if (it->seq == seq) return &*it;
  return nullptr;
}

void FlightRecorder::bind(const void* work, int64_t seq) {
  if (!enabled() || seq == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  work_seq_[work] = seq;
}

void FlightRecorder::complete_work(const void* work, bool ok) {
  if (!enabled()) return;
  int64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = work_seq_.find(work);
    if (it == work_seq_.end()) return;
    seq = it->second;
    work_seq_.erase(it);
  }
  complete(seq, ok);
}

void FlightRecorder::complete(int64_t seq, bool ok) {
  if (!enabled() || seq == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (Entry* e = find(seq)) {
    e->state = ok ? "completed" : "failed";
    e->completed = unix_seconds();
  }
  if (blocked_seq_ == seq) blocked_seq_ = 0;
}

void FlightRecorder::wait_begins(const void* work) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = work_seq_.find(work);
  if (it == work_seq_.end()) return;
  blocked_seq_ = it->second;
  blocked_since_ = unix_seconds();
}

void FlightRecorder::set_phase(const char* phase, int64_t step) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (phase_ != phase) phase_since_ = unix_seconds();
  phase_ = phase;
  step_ = step;
}

nlohmann::json FlightRecorder::to_json(int rank, int world, const std::string& reason) const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json entries = nlohmann::json::array();
  for (const Entry& e : ring_)
    entries.push_back({{"seq", e.seq},
                       {"op", e.op},
                       {"what", e.what},
                       {"numel", e.numel},
                       {"dtype", e.dtype},
                       {"state", e.state},
                       {"issued", e.issued},
                       {"completed", e.completed},
                       {"phase", e.phase},
                       {"step", e.step}});
  // The collective this rank's thread blocks on now, if any: not the oldest one still issued
  // (an asynchronous one, the stop vote, may wait for its wait() while the rank works on).
  const nlohmann::json blocked = blocked_seq_ != 0 ? nlohmann::json(blocked_seq_) : nlohmann::json(nullptr);
  return {{"rank", rank},           {"world", world},         {"reason", reason},
          {"time", unix_seconds()}, {"phase", phase_},        {"phase_since", phase_since_},
          {"step", step_},          {"blocked_seq", blocked}, {"entries", entries}};
}

nlohmann::json FlightRecorder::progress() const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json waiting = nullptr;
  int64_t last_completed = 0;
  for (const Entry& e : ring_) {
    if (e.state == "completed") last_completed = e.seq;
    if (e.seq == blocked_seq_)
      waiting = {{"seq", e.seq}, {"op", e.op}, {"what", e.what}, {"step", e.step}, {"since", blocked_since_}};
  }
  return {{"phase", phase_}, {"step", step_}, {"last_completed", last_completed}, {"waiting", waiting}};
}

}  // namespace ddptrain
