#include "dist/flight_verdict.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include <unistd.h>

namespace ddptrain {
namespace {

// Where a rank's record says it is: the collective its thread waited in (the one it blocked
// on, or the one whose wait failed), its last completed, and the newest it issued (it reached
// every collective up to that one).
struct Where {
  std::optional<nlohmann::json> waiting;
  int64_t last_completed = 0;
  int64_t newest = 0;
};

Where where_of(const nlohmann::json& record) {
  Where w;
  // Records before "blocked_seq" was written: the oldest one still issued (an asynchronous
  // collective not yet waited on, the stop vote, then reads as the one waited in).
  const bool knows_blocked = record.contains("blocked_seq");
  const int64_t blocked =
      knows_blocked && record["blocked_seq"].is_number() ? record["blocked_seq"].get<int64_t>() : 0;
  std::optional<nlohmann::json> failed;
  for (const auto& e : record.at("entries")) {
    const std::string state = e.at("state").get<std::string>();
    const int64_t seq = e.at("seq").get<int64_t>();
    w.newest = std::max(w.newest, seq);
    if (state == "completed") w.last_completed = std::max(w.last_completed, seq);
    if (state == "failed") failed = e;
    if (seq == blocked) w.waiting = e;
    if (!knows_blocked && state != "completed" && !w.waiting) w.waiting = e;
  }
  if (!w.waiting) w.waiting = failed;
  return w;
}

std::string describe(const nlohmann::json& e) {
  return "#" + std::to_string(e.at("seq").get<int64_t>()) + " (" + e.at("op").get<std::string>() + ", " +
         e.at("what").get<std::string>() + ", step " + std::to_string(e.at("step").get<int64_t>()) + ")";
}

}  // namespace

std::string ranks_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

std::string flight_record_path(const std::string& dir, int rank) {
  return dir + "/flight_rank" + std::to_string(rank) + ".json";
}

std::string hang_verdict(const std::map<int, nlohmann::json>& records, int world) {
  std::vector<std::string> lines;
  for (int r = 0; r < world; ++r)
    if (!records.count(r))
      lines.push_back("rank " + std::to_string(r) + " left no record (stopped or killed)");
  std::map<int64_t, std::vector<int>> waiting_at;  // seq -> ranks waiting in it
  std::map<int, Where> where;
  for (const auto& [r, rec] : records) {
    where[r] = where_of(rec);
    if (where[r].waiting) waiting_at[where[r].waiting->at("seq").get<int64_t>()].push_back(r);
  }
  // The first collective number at which two ranks recorded different collectives.
  bool disagree = false;
  std::map<int64_t, std::map<int, const nlohmann::json*>> by_seq;
  for (const auto& [r, rec] : records)
    for (const auto& e : rec.at("entries")) by_seq[e.at("seq").get<int64_t>()][r] = &e;
  for (const auto& [seq, at] : by_seq) {
    const int r0 = at.begin()->first;
    const nlohmann::json* first = at.begin()->second;
    auto differs = std::find_if(at.begin(), at.end(), [&](const auto& kv) {
      return kv.second->at("op") != first->at("op") || kv.second->at("what") != first->at("what");
    });
    if (differs == at.end()) continue;
    lines.push_back("ranks disagree at #" + std::to_string(seq) + ": rank " + std::to_string(r0) + " " +
                    first->at("op").get<std::string>() + " (" + first->at("what").get<std::string>() +
                    ") vs rank " + std::to_string(differs->first) + " " +
                    differs->second->at("op").get<std::string>() + " (" +
                    differs->second->at("what").get<std::string>() + ")");
    disagree = true;
    break;
  }
  if (!waiting_at.empty() && !disagree) {  // ranks that never reached the collective the others wait in
    const int64_t seq = waiting_at.rbegin()->first;
    const std::vector<int>& waiters = waiting_at.rbegin()->second;
    for (const auto& [r, w] : where) {
      const bool reached = w.newest >= seq;
      if (reached) continue;
      const nlohmann::json& rec = records.at(r);
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%.0f",
                    rec.at("time").get<double>() - rec.at("phase_since").get<double>());
      lines.push_back("rank " + std::to_string(r) + " is behind: rank" + (waiters.size() > 1 ? "s " : " ") +
                      ranks_list(waiters) + " wait" + (waiters.size() > 1 ? "" : "s") + " in collective " +
                      describe(*where[waiters[0]].waiting) + "; rank " + std::to_string(r) + " completed #" +
                      std::to_string(w.last_completed) + " and has been in " +
                      rec.at("phase").get<std::string>() + " (step " +
                      std::to_string(rec.at("step").get<int64_t>()) + ") for " + secs + " s");
    }
  }
  if (lines.empty() && !waiting_at.empty())  // every rank reached the same collective
    lines.push_back("no rank is behind: ranks " + ranks_list(waiting_at.rbegin()->second) +
                    " wait in collective " + describe(*where[waiting_at.rbegin()->second[0]].waiting) +
                    " (a slow link or a peer's device?)");
  if (lines.empty()) lines.push_back("every rank completed its last collective: no hang on record");
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

std::string flight_progress_path(const std::string& launch_dir, int rank) {
  return launch_dir + "/progress_rank" + std::to_string(rank) + ".json";
}

std::string flight_request_path(const std::string& launch_dir) { return launch_dir + "/flight_request"; }

std::optional<nlohmann::json> read_flight_file(const std::string& path) {
  std::ifstream in(path);
  if (!in.good()) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const std::exception&) {  // being written (the next read gets it), or not ours
    return std::nullopt;
  }
}

void write_flight_file(const std::string& path, const std::string& text, std::error_code& ec) {
  {
    std::ofstream out(path + ".tmp");
    out << text << '\n';
  }
  std::filesystem::rename(path + ".tmp", path, ec);
}

namespace {

// A record as FlightRecorder::to_json writes it, in what the verdict reads: another file (hand
// edited, another tool's) is skipped rather than failing the verdict or sizing it.
bool well_formed_record(const nlohmann::json& j) {
  constexpr int kMaxWorld = 1 << 20;
  const auto integer = [](const nlohmann::json& o, const char* k) {
    return o.contains(k) && o[k].is_number_integer();
  };
  const auto text = [](const nlohmann::json& o, const char* k) { return o.contains(k) && o[k].is_string(); };
  const auto number = [](const nlohmann::json& o, const char* k) {
    return o.contains(k) && o[k].is_number();
  };
  if (!j.is_object() || !integer(j, "world") || !integer(j, "rank") || !j.contains("entries") ||
      !j["entries"].is_array() || !number(j, "time") || !number(j, "phase_since") || !text(j, "phase") ||
      !integer(j, "step"))
    return false;
  const int64_t world = j["world"].get<int64_t>(), rank = j["rank"].get<int64_t>();
  if (world < 1 || world > kMaxWorld || rank < 0 || rank >= world) return false;
  for (const auto& e : j["entries"])
    if (!e.is_object() || !integer(e, "seq") || !integer(e, "step") || !text(e, "state") || !text(e, "op") ||
        !text(e, "what"))
      return false;
  return true;
}

}  // namespace

std::map<int, nlohmann::json> read_flight_records(const std::string& dir, int& world) {
  std::map<int, nlohmann::json> out;
  world = 0;
  if (!std::filesystem::is_directory(dir)) return out;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    const std::string name = f.path().filename().string();
    if (name.rfind("flight_rank", 0) != 0 || f.path().extension() != ".json") continue;
    auto j = read_flight_file(f.path().string());
    if (!j || !well_formed_record(*j)) continue;  // not ours: skipped
    world = std::max(world, j->at("world").get<int>());
    const int rank = j->at("rank").get<int>();  // first: json's operator= takes its argument by value
    out[rank] = std::move(*j);
  }
  return out;
}

std::string previous_flight_dir(const std::string& dir) { return dir + "/.flight.previous"; }

std::vector<int> flight_record_ranks(const std::string& dir) {
  std::error_code ec;
  std::vector<int> ranks;
  for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = f.path().filename().string();
    if (name.rfind("flight_rank", 0) != 0 || f.path().extension() != ".json") continue;
    const std::string digits = name.substr(11, name.size() - 11 - 5);
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos)
      continue;  // not a rank's record (flight_rank_notes.json)
    ranks.push_back(std::stoi(digits));
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

void clear_previous_flight_records(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string previous = previous_flight_dir(dir);
  std::error_code ec;
  if (!fs::exists(previous, ec)) return;
  // Renamed first, so that the folder the next moves fill is a new one even where the removal
  // fails half way (a file of another user's in it); by a name of this process's, since each
  // node's local rank 0 clears a shared folder at once (the one that finds it gone is done).
  const std::string old = previous + ".old." + std::to_string(::getpid());
  fs::rename(previous, old, ec);
  if (ec && fs::exists(previous))
    throw std::filesystem::filesystem_error("cannot set aside the older flight records", previous, ec);
  fs::remove_all(old, ec);
}

void set_aside_flight_record(const std::string& dir, int rank) {
  namespace fs = std::filesystem;
  const std::string record = flight_record_path(dir, rank);
  std::error_code ec;
  if (!fs::exists(record, ec)) return;
  const std::string previous = previous_flight_dir(dir);
  fs::create_directories(previous, ec);
  fs::rename(record, flight_record_path(previous, rank), ec);
  if (!ec || !fs::exists(record)) return;  // moved (by another node's, on a shared folder)
  // Not kept, then: a record left in the folder would be read as this run's.
  std::error_code removed;
  fs::remove(record, removed);
  if (removed)
    throw std::filesystem::filesystem_error("cannot move or remove an earlier flight record", record, ec);
}

}  // namespace ddptrain
