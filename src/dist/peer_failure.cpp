#include "dist/peer_failure.h"

#include <string>
#include <vector>

#include "util/strings.h"

namespace ddptrain {
namespace {

const std::string kFailed = "ddptrain/failed";

// Set by each rank that has read the job's failure (its watch, or its own announcement).
std::string read_key(int rank) { return str("ddptrain/failed_read/", rank); }

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

// Stored as one letter, P(rimary) or S(econdary), then the text.
std::optional<AnnouncedFailure> decode(const std::vector<uint8_t>& v) {
  if (v.empty()) return std::nullopt;
  return AnnouncedFailure{std::string(v.begin() + 1, v.end()), v[0] == 'S'};
}

}  // namespace

void announce_failure(const BoundedStore& store, int rank, int world, const std::string& reason,
                      bool secondary) {
  // A long message (a backtrace) is cut: the peers quote it in one line. Its own "[rank r/w] "
  // prefix (a collective's error) is said once.
  std::string why = reason;
  const std::string prefix = str("[rank ", rank, "/", world, "] ");
  if (why.rfind(prefix, 0) == 0) why.erase(0, prefix.size());
  const std::vector<uint8_t> mine = bytes(str(secondary ? "S" : "P", "rank ", rank, "/", world, ": ",
                                              why.size() > 600 ? why.substr(0, 600) + "..." : why));
  try {
    const std::vector<uint8_t> there = store.compare_set(kFailed, {}, mine);
    if (there != mine && !secondary && decode(there) && decode(there)->secondary)
      store.compare_set(kFailed, there, mine);  // the root cause replaces a failure it caused
    store.set(read_key(rank), bytes("1"));
  } catch (const std::exception&) {  // the store is gone: so is rank 0, whom the others see go
  }
}

std::optional<AnnouncedFailure> announced_failure(const BoundedStore& store) {
  try {
    if (!store.check({kFailed})) return std::nullopt;
    return decode(store.get(kFailed));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

void wait_until_read(const BoundedStore& store, int rank, int world, std::chrono::milliseconds wait) {
  std::vector<std::string> others;
  for (int r = 0; r < world; ++r)
    if (r != rank) others.push_back(read_key(r));
  const auto until = std::chrono::steady_clock::now() + wait;
  try {
    while (!store.check(others) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } catch (const std::exception&) {
  }
}

PeerFailureWatch::PeerFailureWatch(std::shared_ptr<const BoundedStore> store, int rank, Logger log,
                                   std::chrono::milliseconds grace,
                                   std::function<void(const std::string&)> on_failure,
                                   std::chrono::milliseconds poll)
    : store_(std::move(store)),
      rank_(rank),
      log_(log),
      grace_(grace),
      poll_(poll),
      on_failure_(std::move(on_failure)) {
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
  const std::string own = str("rank ", rank_, "/");
  std::optional<AnnouncedFailure> failure;
  while (!failure) {
    if (stopped_within(poll_)) return;
    try {
      if (!store_->check({kFailed})) continue;
    } catch (const std::exception& e) {  // the store is gone (rank 0 ended): nothing to read any more
      if (store_->unanswered())
        log_.warn(str("this rank no longer watches for the other ranks' failures: ", e.what(),
                      " (Note [Bounded store requests])"));
      return;
    }
    failure = announced_failure(*store_);
    if (!failure) return;
    if (failure->text.rfind(own, 0) == 0) return;  // this rank's own, announced as it stopped us
  }
  try {
    store_->set(read_key(rank_), bytes("1"));
  } catch (const std::exception&) {
  }
  log_.error(str("the job failed on another rank (", failure->text, "); this rank ends in ",
                 grace_.count() / 1000.0,
                 " s unless it ends by itself first (Note [A rank's failure ends the job])"));
  if (stopped_within(grace_)) return;
  // A primary error may have replaced a secondary one meanwhile.
  if (auto now = announced_failure(*store_)) failure = std::move(now);
  try {
    on_failure_(failure->text);
  } catch (const std::exception& e) {
    log_.error(str("on_peer_failure threw: ", e.what()));
  }
}

}  // namespace ddptrain
