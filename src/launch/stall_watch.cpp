#include "launch/stall_watch.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "dist/flight_verdict.h"
#include "launch/output_sink.h"

namespace ddptrain {

StallWatch::StallWatch(std::string launch_dir, double stall_s, std::vector<int> local_ranks, int world,
                       OutputSink& err)
    : launch_dir_(std::move(launch_dir)),
      stall_s_(stall_s),
      local_ranks_(std::move(local_ranks)),
      world_(world),
      err_(err) {}

void StallWatch::reset() {
  std::error_code ec;
  std::filesystem::remove(flight_request_path(launch_dir_), ec);
  for (int r : local_ranks_) std::filesystem::remove(flight_progress_path(launch_dir_, r), ec);
  exited_.clear();
  waits_.clear();
  stall_.clear();
  answered_ = false;
}

void StallWatch::worker_exited(int rank) {
  exited_.insert(rank);
  waits_.erase(rank);
  std::error_code ec;
  std::filesystem::remove(flight_progress_path(launch_dir_, rank), ec);
}

std::optional<std::string> StallWatch::find_stall() {
  std::optional<std::string> found;
  double longest = 0;
  const auto now = std::chrono::steady_clock::now();
  for (int r : local_ranks_) {
    if (exited_.count(r) != 0) continue;
    auto p = read_flight_file(flight_progress_path(launch_dir_, r));
    if (!p || !p->contains("waiting") || (*p)["waiting"].is_null()) {
      waits_.erase(r);
      continue;
    }
    const nlohmann::json& w = (*p)["waiting"];
    const int64_t seq = w.value("seq", int64_t{-1});
    auto [it, first] = waits_.try_emplace(r, SeenWait{seq, now});
    SeenWait& seen = it->second;
    if (!first && seen.seq != seq) seen = {seq, now};
    const double waited = std::chrono::duration<double>(now - seen.first_seen).count();
    if (waited < stall_s_ || waited <= longest) continue;
    longest = waited;
    flight_dir_ = p->value("flight_dir", std::string());
    char secs[32];
    std::snprintf(secs, sizeof(secs), "%.0f", waited);
    found = "rank " + std::to_string(r) + " has waited " + secs + " s in collective #" + std::to_string(seq) +
            " (" + w.value("op", std::string()) + ", " + w.value("what", std::string()) + ", step " +
            std::to_string(w.value("step", int64_t{0})) + ")";
  }
  return found;
}

std::optional<std::string> StallWatch::poll() {
  if (stall_s_ <= 0 || answered_) return std::nullopt;
  const auto now = std::chrono::steady_clock::now();
  if (stall_.empty()) {
    if (now - last_read_ < std::chrono::seconds(1)) return std::nullopt;
    last_read_ = now;
    auto found = find_stall();
    if (!found) return std::nullopt;
    stall_ = *found;
    say(err_, "launch: %s: a stall (--stall_s %g); asking every rank for its flight record\n", stall_.c_str(),
        stall_s_);
    std::ofstream(flight_request_path(launch_dir_)) << "the launcher saw a stall: " << stall_ << '\n';
    asked_ = now;
    return std::nullopt;
  }
  int world = 0;
  const auto records = read_flight_records(flight_dir_, world);
  if (records.size() < static_cast<size_t>(world_) && now - asked_ < std::chrono::seconds(5))
    return std::nullopt;
  answered_ = true;
  std::string verdict = hang_verdict(records, world_);
  if (records.size() < static_cast<size_t>(world_) && local_ranks_.size() < static_cast<size_t>(world_))
    verdict += "(the ranks of other nodes write their records into their node's " + flight_dir_ + ")\n";
  return verdict;
}

}  // namespace ddptrain
