#include "dist/rendezvous_barrier.h"

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

namespace ddptrain {
namespace {

const std::string kJoined = "rendezvous/joined";  // the count
const std::string kAll = "rendezvous/all";        // set by the last to join

std::string joined_text(int64_t joined, int world_size) {
  if (joined < 0) return str("not all of the job's ", world_size, " ranks joined");
  if (joined < world_size) return str(joined, " of the job's ", world_size, " ranks joined");
  return str("the job's ", world_size, " ranks joined, the last too late to be seen");
}

}  // namespace

RendezvousIncomplete::RendezvousIncomplete(int64_t joined_ranks, int world_size)
    : Error(joined_text(joined_ranks, world_size)), joined(joined_ranks) {}

void wait_for_every_rank(c10d::Store& store, int world_size, Clock::time_point deadline,
                         std::chrono::milliseconds then) {
  int64_t joined = store.add(kJoined, 1);
  if (joined == world_size) store.set(kAll, std::vector<uint8_t>{1});
  // Polled, as torch's own store-based barrier polls: LibTorch 1.13's TCPStore cannot cancel a
  // wait that timed out (the answer comes later, to the next request), so no wait until the
  // key is there. The count is read every second: rank 0 gives up at the same deadline, and its
  // store goes with it, so the last count read is what this rank says.
  auto next_count = Clock::now() + std::chrono::seconds(1);
  std::chrono::milliseconds pause(10);  // doubled to 100 ms: a thousand ranks ask 10 times a second
  for (;;) {
    try {
      if (store.check({kAll})) break;
      if (Clock::now() >= next_count) {
        joined = store.add(kJoined, 0);
        next_count = Clock::now() + std::chrono::seconds(1);
      }
    } catch (const std::exception&) {  // the store is gone (rank 0 gave up): the last count read
      throw RendezvousIncomplete(joined, world_size);
    }
    if (Clock::now() >= deadline) {
      try {
        joined = store.add(kJoined, 0);
      } catch (const std::exception&) {
      }
      throw RendezvousIncomplete(joined, world_size);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
  // A TCPStore's wait also sets its socket's timeout, which its other requests keep: a wait on
  // the key now there returns at once and gives them the collective timeout.
  store.setTimeout(then);
  store.wait({kAll});
}

}  // namespace ddptrain
