// Note [A rank's failure ends the job]
// A rank that ends with an error during the run (its data, its disk, a bug) is gone; the others
// learn it only at their next collective, and only where the backend notices: Gloo's sockets
// close at once, but NCCL's peers spin in their kernels until the process group's timeout
// (--dist_timeout_s, 10 min by default), and a rank held in its own code waits as long. So the
// failing rank writes its error into the job's store before it ends (announce_failure: the
// first announcement stays, except that a primary error replaces a secondary one, a collective
// another's failure broke, so it names the root cause), and every rank's PeerFailureWatch polls
// for it (twice a second). A rank that sees it logs it, gives its main thread a grace period to
// end by itself (Gloo's error, with its flight record), and then calls the program's reaction:
// the CLI reports the announced error as this rank's secondary one and ends the process (exit
// 1). A library program chooses (DistOptionsResolved::on_peer_failure; without one, no watch
// runs). A rank waiting on the store for rank 0 (DistContext::wait_for_main) polls and reads it
// too, and a collective that fails names it. The store of a job without torchrun's agent lives
// in rank 0, so rank 0 ending with an error waits (at most 2 s) until every other rank has read
// it. A rank killed without an error (SIGKILL, the OOM killer) announces nothing: the launcher
// ends its node's others, and NCCL's timeout the rest.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "dist/bounded_store.h"
#include "obs/logger.h"

namespace ddptrain {

/// The job's announced failure: "rank R/W: what", and whether it was secondary.
struct AnnouncedFailure {
  std::string text;
  bool secondary = false;
};

/// Writes "rank R/W: reason" as the job's failure unless one is there already (a primary one
/// replaces a secondary one), and counts this rank as having read the job's failure. Never
/// throws (the store may be gone).
void announce_failure(const BoundedStore& store, int rank, int world, const std::string& reason,
                      bool secondary);

/// The job's announced failure, if any (nullopt also when the store is gone).
std::optional<AnnouncedFailure> announced_failure(const BoundedStore& store);

/// Waits, at most `wait`, until every rank but `rank` has read the job's failure (rank 0,
/// whose store ends with it). Never throws.
void wait_until_read(const BoundedStore& store, int rank, int world, std::chrono::milliseconds wait);

class PeerFailureWatch {
 public:
  /// Polls `store` every `poll`; once another rank's failure is announced, logs it, waits
  /// `grace` (ended early by stop() or the destructor) and calls on_failure(announcement).
  PeerFailureWatch(std::shared_ptr<const BoundedStore> store, int rank, Logger log,
                   std::chrono::milliseconds grace, std::function<void(const std::string&)> on_failure,
                   std::chrono::milliseconds poll = std::chrono::milliseconds(500));
  ~PeerFailureWatch();
  PeerFailureWatch(const PeerFailureWatch&) = delete;
  PeerFailureWatch& operator=(const PeerFailureWatch&) = delete;

  /// This rank ends by itself (it announces its own error): stop watching.
  void stop();

 private:
  void loop();
  /// Waits d unless stopped; true when stopped.
  bool stopped_within(std::chrono::milliseconds d);

  std::shared_ptr<const BoundedStore> store_;
  int rank_;
  Logger log_;
  std::chrono::milliseconds grace_, poll_;
  std::function<void(const std::string&)> on_failure_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ddptrain
