// Note [A rank's failure ends the job]
// A rank that ends with an error during the run (its data, its disk, a bug) is gone; the others
// learn it only at their next collective, and only where the backend notices: Gloo's sockets
// close at once, but NCCL's peers spin in their kernels until the process group's timeout
// (--dist_timeout_s, 10 min by default), and a rank waiting on the store for rank 0's save, or
// held in its own code, waits as long. So the failing rank writes its error into the job's store
// before it ends (announce_failure: the first announcement stays, so it names the root cause),
// and every rank's PeerFailureWatch polls for it (twice a second). A rank that sees it logs it,
// gives its main thread a grace period to end by itself (Gloo's error, with its flight record),
// and then calls the program's reaction: the CLI reports the peer's error as its own secondary
// one and ends the process (exit 1). A library program chooses (DistOptionsResolved::on_peer_failure;
// without one, no watch runs). The store of a job without torchrun's agent lives in rank 0, so
// rank 0 announcing waits (at most 2 s) until every other rank has seen it. A collective that
// fails names the announced error too (DistContext::wait).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "obs/logger.h"

namespace ddptrain {

/// Writes "rank R/W: reason" as the job's failure unless one is there already; true when this
/// announcement is the first (else the one there counts as read by this rank, unless
/// already_read: its watch counted it). With wait_for_peers (this rank serves the store) the
/// first then waits, at most `wait`, until the other world - 1 ranks have read it. Never throws
/// (the store may be gone).
bool announce_failure(c10d::Store& store, int rank, int world, const std::string& reason, bool wait_for_peers,
                      bool already_read, std::chrono::milliseconds wait = std::chrono::milliseconds(2000));

/// The job's announced failure, if any (nullopt also when the store is gone).
std::optional<std::string> announced_failure(c10d::Store& store);

class PeerFailureWatch {
 public:
  /// Polls `store` every `poll`; once a failure of another rank is announced, logs it, waits
  /// `grace` (ended early by the destructor) and calls on_failure(announcement).
  PeerFailureWatch(c10::intrusive_ptr<c10d::Store> store, Logger log, std::chrono::milliseconds grace,
                   std::function<void(const std::string&)> on_failure,
                   std::chrono::milliseconds poll = std::chrono::milliseconds(500));
  ~PeerFailureWatch();
  PeerFailureWatch(const PeerFailureWatch&) = delete;
  PeerFailureWatch& operator=(const PeerFailureWatch&) = delete;

  /// This rank announced the failure itself: stop watching.
  void stop();
  /// Whether it read another rank's announcement (and counted itself as having read it).
  bool read_one() const { return read_one_; }

 private:
  void loop();
  /// Waits d unless stopped; true when stopped.
  bool stopped_within(std::chrono::milliseconds d);

  c10::intrusive_ptr<c10d::Store> store_;
  Logger log_;
  std::chrono::milliseconds grace_, poll_;
  std::function<void(const std::string&)> on_failure_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<bool> read_one_{false};
  std::thread thread_;
};

}  // namespace ddptrain
