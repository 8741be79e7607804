#include "dist/rendezvous_barrier.h"

#include <string>
#include <vector>

#include "util/error.h"

namespace ddptrain {
namespace {

const std::string kJoined = "rendezvous/joined";  // the count
const std::string kAll = "rendezvous/all";        // set by the last to join

}  // namespace

void wait_for_every_rank(c10d::Store& store, int world_size, std::chrono::milliseconds deadline) {
  if (store.add(kJoined, 1) == world_size) store.set(kAll, std::vector<uint8_t>{1});
  try {
    store.wait({kAll}, deadline);
  } catch (const std::exception&) {
    int64_t joined = -1;
    try {
      joined = store.add(kJoined, 0);
    } catch (const std::exception&) {  // the store itself is gone: the count is unknown
    }
    throw Error(str(joined >= 0 ? str(joined, " of the job's ") : std::string("not all of the job's "),
                    world_size, " ranks joined within ", deadline.count() / 1000,
                    " s (--rendezvous_timeout_s, or --dist_timeout_s where none is given)"));
  }
}

}  // namespace ddptrain
