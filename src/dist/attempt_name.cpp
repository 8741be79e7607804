#include "dist/attempt_name.h"

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "dist/rendezvous_barrier.h"
#include "util/error.h"
#include "util/torch_compat.h"

namespace ddptrain {
namespace {

const std::string kHello = "ddptrain/attempt/hello/";      // + rank: its token, then "in:" + token
const std::string kWelcome = "ddptrain/attempt/welcome/";  // + token: the attempt's name
const std::string kIn = "in:";                             // a hello answered: the rank has the name

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

// Rank 0: welcomes each hello it reads (a token it has not welcomed yet) until each other rank has
// answered the welcome of its latest one; a welcome its rank did not take is taken back.
std::string welcome_the_others(c10d::Store& store, int world_size, Clock::time_point deadline) {
  const std::string name = fresh_token();
  std::vector<int> waiting;  // the ranks that have not answered
  for (int r = 1; r < world_size; ++r) waiting.push_back(r);
  std::vector<std::string> welcomed(static_cast<size_t>(world_size));  // the token welcomed, per rank
  bool all_said = false;  // every rank's hello is there (an earlier attempt's counts as said)
  const bool done = poll_until(deadline, [&] {
    if (waiting.empty()) return true;
    std::vector<std::string> keys;
    for (const int r : waiting) keys.push_back(str(kHello, r));
    if (!all_said && !(all_said = store.check(keys))) return false;
    const std::vector<std::vector<uint8_t>> said = compat::store_multi_get(store, keys);
    std::vector<int> still;
    for (size_t i = 0; i < waiting.size(); ++i) {
      const std::string text(said[i].begin(), said[i].end());
      std::string& last = welcomed[static_cast<size_t>(waiting[i])];
      if (!last.empty() && text == kIn + last) continue;  // answered
      still.push_back(waiting[i]);
      if (text.rfind(kIn, 0) == 0 || text == last) continue;  // an earlier attempt's answer, or no news
      if (!last.empty()) store.deleteKey(kWelcome + last);
      store.set(kWelcome + text, value_of(name));
      last = text;
    }
    waiting = std::move(still);
    return waiting.empty();
  });
  if (done) return name;
  int64_t joined = world_size - static_cast<int64_t>(waiting.size());  // this rank and those answered
  if (!all_said)                                                       // a first attempt: who said hello
    for (const int r : waiting) joined += store.check({str(kHello, r)}) ? 1 : 0;
  throw RendezvousIncomplete(joined, world_size);
}

// Any other rank: says a fresh token, takes the name its welcome gives and answers it.
std::string be_welcomed(c10d::Store& store, int rank, int world_size, Clock::time_point deadline) {
  const std::string token = fresh_token(), hello = str(kHello, rank), welcome = kWelcome + token;
  store.set(hello, value_of(token));
  if (!poll_until(deadline, [&] { return store.check({welcome}); }))
    throw RendezvousIncomplete(-1, world_size);
  const std::vector<uint8_t> name = store.get(welcome);
  store.deleteKey(welcome);
  store.set(hello, value_of(kIn + token));
  return std::string(name.begin(), name.end());
}

}  // namespace

std::string agree_on_attempt_name(c10d::Store& store, int rank, int world_size, Clock::time_point deadline) {
  return rank == 0 ? welcome_the_others(store, world_size, deadline)
                   : be_welcomed(store, rank, world_size, deadline);
}

}  // namespace ddptrain
