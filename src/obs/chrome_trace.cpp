#include "obs/chrome_trace.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/json_text.h"

namespace ddptrain {

ChromeTrace::ChromeTrace(std::string path, int rank, TraceSchedule schedule)
    : path_(std::move(path)), rank_(rank), schedule_(schedule) {}

bool ChromeTrace::recording(int64_t run_step) const {
  const int64_t first = int64_t{schedule_.wait} + schedule_.warmup;
  return !path_.empty() && !written_ && run_step >= first && run_step < first + schedule_.active;
}

void ChromeTrace::add(const char* name, Clock::time_point start, Clock::time_point end, int64_t run_step) {
  if (!recording(run_step)) return;
  const double ts = origin_unix_us_ + std::chrono::duration<double, std::micro>(start - origin_).count();
  const double dur = std::chrono::duration<double, std::micro>(end - start).count();
  events_.push_back({name, ts, dur, run_step});
}

bool ChromeTrace::maybe_write(int64_t run_step) {
  const int64_t end = int64_t{schedule_.wait} + schedule_.warmup + schedule_.active;
  return run_step + 1 >= end && write();
}

bool ChromeTrace::write() {
  if (path_.empty() || written_) return false;
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"},
                    {"ph", "M"},
                    {"pid", rank_},
                    {"args", {{"name", "rank " + std::to_string(rank_)}}}});
  events.push_back(
      {{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", 0}, {"args", {{"name", "training"}}}});
  for (const auto& e : events_)
    events.push_back({{"name", e.name},
                      {"cat", "step"},
                      {"ph", "X"},
                      {"ts", e.ts_us},
                      {"dur", e.dur_us},
                      {"pid", rank_},
                      {"tid", 0},
                      {"args", {{"step", e.step}}}});
  nlohmann::json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  std::ofstream out(path_);
  DDP_CHECK(out.good(), "cannot write the profiler trace '", path_, "'");
  out << json_text(doc) << '\n';
  written_ = true;
  return true;
}

}  // namespace ddptrain
