// Note [Flight recorder]
// Every rank keeps its last N collectives (--flight_recorder N, 64 by default; 0: off; PyTorch's
// NCCL flight recorder and Horovod's stall inspector are the models): a sequence number (the
// same on every rank for the same collective, DESIGN.md invariant 1), the operation, what it is
// for ("gradient bucket 3", "buffer broadcast", ...), elements and dtype, its state (issued,
// completed, failed) and times, and what the step loop was doing when it was issued (phase and
// step). When a collective fails or times out (Gloo: the host waits for each; on NCCL the
// process group's watchdog ends a hung rank instead: Note [Waiting on NCCL]), the rank writes
// flight_rank<r>.json into the dump folder (--checkpoint_dir for `ddptrain train`) and raises a flag in the
// job's store; every live rank's watchdog thread polls that flag and writes its own, so a rank whose main
// thread is stuck in user code still answers. The failing rank then reads the files it finds
// and logs a verdict (dist/flight_verdict.h), as `ddptrain inspect hang DIR` does.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

namespace ddptrain {

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity = 64);
  bool enabled() const { return capacity_ > 0; }

  /// A collective is issued; returns its sequence number (1, 2, ...; 0 when off).
  int64_t issue(const char* op, const std::string& what, const std::vector<at::Tensor>& tensors);
  /// Its Work, so that waiting on that Work completes the record.
  void bind(const void* work, int64_t seq);
  void complete_work(const void* work, bool ok);
  /// The caller's thread now blocks on that Work (until complete_work).
  void wait_begins(const void* work);
  void complete(int64_t seq, bool ok);
  /// What the step loop does from now on ("data", "forward", "backward", "optimizer",
  /// "checkpoint", "evaluation") and its step.
  void set_phase(const char* phase, int64_t step);

  /// The record as written to flight_rank<r>.json: the entries, the phase, and "blocked_seq",
  /// the collective this rank's thread blocks on (null when it blocks on none).
  nlohmann::json to_json(int rank, int world, const std::string& reason) const;
  /// Where this rank is now, for a launcher watching for stalls (Note [Stall seen by the
  /// launcher]): {"phase", "step", "last_completed", "waiting": the collective this rank blocks
  /// on as {"seq", "op", "what", "step", "since"} or null}. Not the oldest one still issued: an
  /// asynchronous one (the stop vote) may wait for its wait() while the rank works on.
  nlohmann::json progress() const;

 private:
  struct Entry {
    int64_t seq = 0;
    std::string op, what, dtype;
    int64_t numel = 0;
    std::string state = "issued";
    double issued = 0, completed = 0;  // unix seconds
    std::string phase;
    int64_t step = 0;
  };
  Entry* find(int64_t seq);

  size_t capacity_;
  mutable std::mutex mu_;
  std::deque<Entry> ring_;
  std::unordered_map<const void*, int64_t> work_seq_;
  int64_t next_seq_ = 1;
  int64_t blocked_seq_ = 0;  // wait_begins
  double blocked_since_ = 0;
  std::string phase_ = "start-up";
  double phase_since_ = 0;
  int64_t step_ = 0;
};

}  // namespace ddptrain
