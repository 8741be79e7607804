#include "dist/rendezvous_barrier.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <future>
#include <memory>
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

// Whether something at `a` accepts a connection within 200 ms (closed at once: a TCPStore
// server takes a client that leaves without a word as any client that ends).
bool accepts(const addrinfo& a) {
  const int fd = ::socket(a.ai_family, a.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a.ai_protocol);
  if (fd < 0) return false;
  bool connected = ::connect(fd, a.ai_addr, a.ai_addrlen) == 0;
  if (!connected && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof err;
    connected =
        ::poll(&p, 1, 200) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
  }
  ::close(fd);
  return connected;
}

}  // namespace

// Note [A client waits for the store's server]: torch's TCPStore client, refused, tries again
// after a backoff that starts near a second, and the ranks of a job start together, so a
// client usually came before rank 0 served the store and every start lost up to a second
// (measured: a server 0.1 s late, its client connected after 0.4-0.7 s, on each torch). This
// asks every 10 ms until something accepts at host:port, before torch's client connects; a
// name that cannot resolve fails at once, nothing accepting until `deadline` fails then.
void wait_until_served(const std::string& host, uint16_t port, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  for (;;) {
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
    if (rc != 0 && rc != EAI_AGAIN)
      throw Error(
          str("MASTER_ADDR ", host, " does not resolve (", ::gai_strerror(rc), "): give rank 0's host"));
    const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owned(found, &::freeaddrinfo);
    for (const addrinfo* a = found; a != nullptr; a = a->ai_next)
      if (accepts(*a)) return;
    if (Clock::now() >= deadline)
      throw Error(
          rc == EAI_AGAIN
              ? str("MASTER_ADDR ", host, " did not resolve within the rendezvous's time (",
                    ::gai_strerror(rc), ")")
              : str("nothing accepted a connection at ", host, ":", port, " within the rendezvous's time"));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

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
  // key is there. The count is read every second, and at the deadline: rank 0 gives up at the
  // same deadline, and its store goes with it, so the last count read is what this rank says.
  auto next_count = Clock::now() + std::chrono::seconds(1);
  const bool all = poll_until(deadline, [&] {
    try {
      if (store.check({kAll})) return true;
      if (Clock::now() >= deadline || Clock::now() >= next_count) {
        bound();
        joined = store.add(kJoined, 0);
        next_count = Clock::now() + std::chrono::seconds(1);
      }
    } catch (const std::exception&) {  // the store is gone (rank 0 gave up): the last count read
      throw RendezvousIncomplete(joined, world_size);
    }
    return false;
  });
  if (!all) throw RendezvousIncomplete(joined, world_size);
  // From here a request waits as long as a collective: the store's timeout, which its gets and
  // waits take; on 1.13 a wait (on the key now there: at once) also gives it to the socket.
  store.setTimeout(then);
  store.wait({kAll});
}

}  // namespace ddptrain
