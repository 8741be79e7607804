#include "dist/peer_failure.h"

#include <string>
#include <vector>

#include "util/strings.h"

namespace ddptrain {
namespace {

const std::string kFailed = "ddptrain/failed";
const std::string kSeen = "ddptrain/failed_seen";

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

}  // namespace

bool announce_failure(c10d::Store& store, int rank, int world, const std::string& reason, bool wait_for_peers,
                      bool already_read, std::chrono::milliseconds wait) {
  // A long message (a backtrace) is cut: the peers quote it in one line. Its own "[rank r/w] "
  // prefix (a collective's error) is said once.
  std::string why = reason;
  const std::string prefix = str("[rank ", rank, "/", world, "] ");
  if (why.rfind(prefix, 0) == 0) why.erase(0, prefix.size());
  const std::string mine = str("rank ", rank, "/", world, ": ", why.size() > 600 ? why.substr(0, 600) + "..." : why);
  try {
    if (store.compareSet(kFailed, {}, bytes(mine)) != bytes(mine)) {
      if (!already_read) store.add(kSeen, 1);  // another's came first: this rank has read it
      return false;
    }
    const auto until = std::chrono::steady_clock::now() + wait;
    while (wait_for_peers && store.add(kSeen, 0) < world - 1 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return true;
  } catch (const std::exception&) {  // the store is gone: so is rank 0, whom the others see go
    return false;
  }
}

std::optional<std::string> announced_failure(c10d::Store& store) {
  try {
    if (!store.check({kFailed})) return std::nullopt;
    const std::vector<uint8_t> v = store.get(kFailed);
    return std::string(v.begin(), v.end());
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

PeerFailureWatch::PeerFailureWatch(c10::intrusive_ptr<c10d::Store> store, Logger log,
                                   std::chrono::milliseconds grace,
                                   std::function<void(const std::string&)> on_failure,
                                   std::chrono::milliseconds poll)
    : store_(std::move(store)), log_(log), grace_(grace), poll_(poll), on_failure_(std::move(on_failure)) {
  thread_ = std::thread([this] { loop(); });
}

PeerFailureWatch::~PeerFailureWatch() {
  stop();
  thread_.join();
}

void PeerFailureWatch::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
}

bool PeerFailureWatch::stopped_within(std::chrono::milliseconds d) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, d, [this] { return stop_; });
}

void PeerFailureWatch::loop() {
  std::optional<std::string> failure;
  while (!failure) {
    if (stopped_within(poll_)) return;
    try {
      if (!store_->check({kFailed})) continue;
    } catch (const std::exception&) {  // the store is gone (rank 0 ended): nothing to read any more
      return;
    }
    failure = announced_failure(*store_);
    if (!failure) return;
  }
  try {
    store_->add(kSeen, 1);
    read_one_ = true;
  } catch (const std::exception&) {
  }
  log_.error(str("the job failed on another rank (", *failure, "); this rank ends in ", grace_.count() / 1000.0,
                 " s unless it ends by itself first (Note [A rank's failure ends the job])"));
  if (stopped_within(grace_)) return;
  on_failure_(*failure);
}

}  // namespace ddptrain
