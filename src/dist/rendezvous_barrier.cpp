#include "dist/rendezvous_barrier.h"

#include <algorithm>
#include <string>
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
  // In waits of a second at most, reading the count after each: rank 0 gives up at the same
  // deadline, and its store goes with it, so the last count read is what this rank says.
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    try {  // a zero timeout would mean none: at least 100 ms
      store.wait({kAll}, std::clamp(left, std::chrono::milliseconds(100), std::chrono::milliseconds(1000)));
      break;
    } catch (const std::exception&) {
      try {
        joined = store.add(kJoined, 0);
      } catch (const std::exception&) {  // the store is gone (rank 0 gave up): the last count read
        throw RendezvousIncomplete(joined, world_size);
      }
      if (Clock::now() >= deadline) throw RendezvousIncomplete(joined, world_size);
    }
  }
  // A TCPStore's wait also sets its socket's timeout, which its other requests keep: a wait on
  // the key now there returns at once and gives them the collective timeout.
  store.setTimeout(then);
  store.wait({kAll});
}

}  // namespace ddptrain
