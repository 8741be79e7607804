#include "dist/rendezvous_barrier.h"

#include <algorithm>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace ddptrain {
namespace {

const std::string kJoined = "rendezvous/joined";     // the count
const std::string kAll = "rendezvous/all";           // set by the last to join
const std::string kArrived = "rendezvous/arrived/";  // + rank: each rank's own key

std::string joined_text(int64_t joined, int world_size) {
  if (joined < 0) return str("not all of the job's ", world_size, " ranks joined");
  if (joined < world_size) return str(joined, " of the job's ", world_size, " ranks joined");
  return str("the job's ", world_size, " ranks joined, the last too late to be seen");
}

}  // namespace

c10::intrusive_ptr<c10d::TCPStore> connect_store(const std::string& host, const c10d::TCPStoreOptions& so,
                                                 Clock::time_point deadline) {
  std::packaged_task<c10::intrusive_ptr<c10d::TCPStore>()> make(
      [host, so] { return c10::make_intrusive<c10d::TCPStore>(host, so); });
  std::future<c10::intrusive_ptr<c10d::TCPStore>> made = make.get_future();
  std::thread(std::move(make)).detach();
  // A few seconds past the deadline: where torch's own timeout ends the wait, its error says why.
  if (made.wait_until(deadline + std::chrono::seconds(5)) == std::future_status::timeout)
    throw Error(str("the store at ", host, ":", so.port, " took the connection and did not answer (another ",
                    "program listens at MASTER_PORT, or its rank 0 is stopped)"));
  return made.get();  // or torch's error
}

RendezvousIncomplete::RendezvousIncomplete(int64_t joined_ranks, int world_size)
    : Error(joined_text(joined_ranks, world_size)), joined(joined_ranks) {}

void wait_for_every_rank(c10d::Store& store, int rank, int world_size, Clock::time_point deadline,
                         std::chrono::milliseconds then) {
  // LibTorch 1.13's TCPStore client bounds a request's answer only once a wait or a get has set
  // its socket's timeout: a wait on a key that is there (this rank's own) sets it to what is
  // left of the deadline, before each request that could otherwise wait for ever (a rank 0 that
  // stopped answering, a program at MASTER_PORT that never does). 2.x bounds its own.
  const std::string mine = str(kArrived, rank);
  const auto bound = [&] {
    store.wait({mine},
               std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                        std::chrono::milliseconds(1000)));
  };
  int64_t joined = -1;
  try {
    store.set(mine, std::vector<uint8_t>{1});
    bound();
    joined = store.add(kJoined, 1);
  } catch (const std::exception&) {  // the store went (rank 0 gave up) or did not answer in time
    throw RendezvousIncomplete(joined, world_size);
  }
  if (joined == world_size) store.set(kAll, std::vector<uint8_t>{1});
  // Polled, as torch's own store-based barrier polls: LibTorch 1.13's TCPStore cannot cancel a
  // wait that timed out (the answer comes later, to the next request), so no wait until the
  // key is there. The count is read every second: rank 0 gives up at the same deadline, and its
  // store goes with it, so the last count read is what this rank says.
  auto next_count = Clock::now() + std::chrono::seconds(1);
  std::chrono::milliseconds pause(10);  // doubled to 100 ms: a thousand ranks ask 10 times a second
  for (;;) {
    const bool late = Clock::now() >= deadline;  // taken before the check: one more at the deadline
    try {
      if (store.check({kAll})) break;
      if (late || Clock::now() >= next_count) {
        bound();
        joined = store.add(kJoined, 0);
        next_count = Clock::now() + std::chrono::seconds(1);
      }
    } catch (const std::exception&) {  // the store is gone (rank 0 gave up): the last count read
      throw RendezvousIncomplete(joined, world_size);
    }
    if (late) throw RendezvousIncomplete(joined, world_size);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
  // From here a request waits as long as a collective: the store's timeout, which its gets and
  // waits take; on 1.13 a wait (on the key now there: at once) also gives it to the socket.
  store.setTimeout(then);
  store.wait({kAll});
}

}  // namespace ddptrain
