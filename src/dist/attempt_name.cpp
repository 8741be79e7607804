#include "dist/attempt_name.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include "dist/rendezvous_barrier.h"
#include "util/error.h"
#include "util/torch_compat.h"

namespace ddptrain {
namespace {

const std::string kHello = "ddptrain/attempt/hello/";      // + rank: its latest token
const std::string kWelcome = "ddptrain/attempt/welcome/";  // + token: the attempt's name
const std::string kCounted = "/attempt/welcomed";          // after the name: the ranks welcomed

// 128 bits from the system's entropy, with the process and the time mixed in.
std::string fresh_token() {
  std::random_device device;
  uint64_t a = (static_cast<uint64_t>(device()) << 32) ^ device();
  uint64_t b = (static_cast<uint64_t>(device()) << 32) ^ device();
  a ^= static_cast<uint64_t>(::getpid()) << 40;
  b ^= static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  char text[33];
  std::snprintf(text, sizeof(text), "%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return text;
}

std::vector<uint8_t> value_of(const std::string& s) { return {s.begin(), s.end()}; }

// Polls `ready` every 10 ms, doubled to 100 ms (a thousand ranks ask 10 times a second), until it
// is true or `deadline` passes; a store that fails (rank 0's agent gone) counts as not ready.
template <typename Ready>
bool poll_until(Clock::time_point deadline, Ready ready) {
  std::chrono::milliseconds pause(10);
  for (;;) {
    const bool late = Clock::now() >= deadline;  // taken before: one more try at the deadline
    try {
      if (ready()) return true;
    } catch (const std::exception&) {
      return false;
    }
    if (late) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
}

// Rank 0: welcomes every hello it reads until the other ranks have all counted themselves in.
std::string welcome_the_others(c10d::Store& store, int world_size, Clock::time_point deadline) {
  const std::string name = fresh_token();
  std::vector<std::string> hellos;
  for (int r = 1; r < world_size; ++r) hellos.push_back(str(kHello, r));
  std::vector<std::vector<uint8_t>> welcomed(hellos.size());
  bool all_said = hellos.empty();
  int64_t counted = 0;
  const bool done = poll_until(deadline, [&] {
    if (!all_said) all_said = store.check(hellos);  // an earlier attempt's count as said
    if (all_said) {
      const std::vector<std::vector<uint8_t>> now = compat::store_multi_get(store, hellos);
      for (size_t i = 0; i < now.size(); ++i)
        if (now[i] != welcomed[i]) {
          store.set(kWelcome + std::string(now[i].begin(), now[i].end()), value_of(name));
          welcomed[i] = now[i];
        }
    }
    counted = store.add(str("ddptrain/", name, kCounted), 0);
    return counted == world_size - 1;
  });
  if (!done) throw RendezvousIncomplete(counted + 1, world_size);
  return name;
}

// Any other rank: says a fresh token and takes the name its welcome gives.
std::string be_welcomed(c10d::Store& store, int rank, int world_size, Clock::time_point deadline) {
  const std::string token = fresh_token(), welcome = kWelcome + token;
  try {
    store.set(str(kHello, rank), value_of(token));
  } catch (const std::exception&) {
    throw RendezvousIncomplete(-1, world_size);
  }
  if (!poll_until(deadline, [&] { return store.check({welcome}); }))
    throw RendezvousIncomplete(-1, world_size);
  try {
    const std::vector<uint8_t> name = store.get(welcome);
    store.deleteKey(welcome);
    const std::string text(name.begin(), name.end());
    store.add(str("ddptrain/", text, kCounted), 1);
    return text;
  } catch (const std::exception&) {
    throw RendezvousIncomplete(-1, world_size);
  }
}

}  // namespace

std::string agree_on_attempt_name(c10d::Store& store, int rank, int world_size, Clock::time_point deadline) {
  return rank == 0 ? welcome_the_others(store, world_size, deadline)
                   : be_welcomed(store, rank, world_size, deadline);
}

}  // namespace ddptrain
