// Note [Bounded store requests]
// A TCPStore client's request waits for its answer with no bound of its own (torch 2.x's check,
// set and get read the socket until the server answers; LibTorch 1.13's until a wait has set a
// timeout): a rank 0 that is stopped, or whose host is gone without a word (powered off, cut off:
// no reset reaches the peers), holds the request for ever, and the client's lock with it, so
// every later request of that client too. Seen: rank 0 SIGSTOPped, rank 1's collective failed at
// its 20 s timeout, and rank 1 then waited for ever (killed at 200 s): its main thread, raising
// the flight recorder's flag, queued behind the failure watch's check, which waited for an
// answer that never came. So after the rendezvous everything ddptrain asks of the store (the
// failure watch's polls, the flight recorder's flag and polls, a failing rank's announcement, the
// waits for rank 0's writes) goes through a BoundedStore: each request runs on a thread of its
// own, waited for kStoreAnswer; one that is not answered by then fails (an Error, as a store
// that is gone), and so does every later request at once, since the client stays held. A rank
// that lost rank 0 so ends soon after the collective that found it. These requests go through a
// client of their own: the process group's (NCCL's get of a communicator's id, which holds its
// client until rank 0 comes, seconds or minutes into a run) would otherwise hold theirs past the
// bound with nothing wrong; its own requests are not bounded here. A watch whose request went
// unanswered says so as it stops.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace ddptrain {

/// How long a request waits for the store's answer: a request is a few bytes that the server's
/// own thread answers in microseconds; seconds without one mean a server that is stopped or gone.
inline constexpr std::chrono::milliseconds kStoreAnswer{10000};

class BoundedStore {
 public:
  explicit BoundedStore(c10::intrusive_ptr<c10d::Store> store,
                        std::chrono::milliseconds answer = kStoreAnswer);

  /// As c10d::Store's; each throws an Error where no answer came within the bound (or an earlier
  /// request's did not), or the store's own error. Any thread may call them.
  bool check(const std::vector<std::string>& keys) const;
  std::vector<uint8_t> get(const std::string& key) const;
  void set(const std::string& key, const std::vector<uint8_t>& value) const;
  std::vector<uint8_t> compare_set(const std::string& key, const std::vector<uint8_t>& expected,
                                   const std::vector<uint8_t>& desired) const;

  /// Whether a request went unanswered (every later one fails at once).
  bool unanswered() const { return unanswered_; }

 private:
  template <typename R>
  R request(const char* what, std::function<R(c10d::Store&)> op) const;

  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds answer_;
  mutable std::atomic<bool> unanswered_{false};
};

}  // namespace ddptrain
