// Note [Rendezvous deadline]
// How long the ranks wait for each other to join (--rendezvous_timeout_s) is not how long a
// collective may take (--dist_timeout_s): nodes of a cluster job start minutes apart, while a
// hang in training should end soon. PyTorch's init_process_group uses one timeout for both
// (and so does ddptrain where no rendezvous timeout is given). The deadline is the joining's
// in all: the store's making (a client's connection, retried until rank 0 serves it, and torch
// 2.x's first exchange, which has no bound of its own: waited for on a thread) gets it, then
// every rank counts itself in and polls, until that deadline, for all to have (this barrier;
// LibTorch 1.13 cannot cancel a wait that timed out); only then does the store take the
// collective timeout and the process group connect, its peers all there. A rank left waiting
// says how many of the job's ranks joined.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

#include <string>
#include <thread>

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "util/clock.h"
#include "util/error.h"

namespace ddptrain {

/// Not all ranks joined by the deadline.
class RendezvousIncomplete : public Error {
 public:
  RendezvousIncomplete(int64_t joined, int world_size);
  int64_t joined;  // the ranks that had counted themselves in; -1: unknown (the store is gone)
};

/// The TCPStore of `so` at `host` (a client, or rank 0's server and its client), made on a
/// thread of its own that this one waits for until `deadline`: torch 2.x's client pings the
/// server as it connects, with no bound of its own, and a program at the port that accepts and
/// never answers (or a stopped rank 0) held it for ever. Past the deadline an Error; that thread
/// is left blocked, holding one socket, until the process ends.
c10::intrusive_ptr<c10d::TCPStore> connect_store(const std::string& host, const c10d::TCPStoreOptions& so,
                                                 Clock::time_point deadline);

/// Polls host:port every 10 ms until something accepts a connection, for a rank that may come
/// before rank 0 serves the store (Note [A client waits for the store's server]). Error at once
/// for a host that does not resolve, at `deadline` where nothing accepted.
void wait_until_served(const std::string& host, uint16_t port, Clock::time_point deadline);

/// Calls `ready` every 10 ms, the pause doubled up to 100 ms (a thousand ranks ask 10 times a
/// second), until it returns true (then true) or `deadline` has passed (then false, after one last
/// call at the deadline). What `ready` throws goes to the caller.
template <typename Ready>
bool poll_until(Clock::time_point deadline, Ready ready) {
  std::chrono::milliseconds pause(10);
  for (;;) {
    const bool late = Clock::now() >= deadline;  // taken before the call: one more at the deadline
    if (ready()) return true;
    if (late) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
}

/// Counts `rank` in on `store` and waits until all `world_size` ranks have, at most until
/// `deadline` (every request bounded by it); then the store's requests wait as long as `then`
/// (the collective timeout).
/// Once per store (a fresh store, or a prefix of its own, per attempt).
void wait_for_every_rank(c10d::Store& store, int rank, int world_size, Clock::time_point deadline,
                         std::chrono::milliseconds then);

}  // namespace ddptrain
