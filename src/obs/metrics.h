// Metrics file (--metrics_file PATH): JSON lines, one record at the start of a run, one per
// step line and one per epoch, written by rank 0 only, flushed per record so a crashed run
// keeps what it logged. Every record has "kind" ("run", "step" or "epoch"), "step"
// (optimizer steps so far), "epoch", "time_s" (seconds since the writer opened: in `train`,
// from the "run" record, after the model, the data and a resumed checkpoint were loaded) and
// "unix_time" (wall clock, seconds); the rest are the numbers of the log line ("run": the
// precision chosen and why, world size, backend, threads, buckets). A NaN or an infinity (a
// loss that diverged) is written as null: JSON has neither (`ddptrain plot` says it left one out).
#pragma once

#include <chrono>
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace ddptrain {

class MetricsWriter {
 public:
  /// Inactive when path is empty or this is not rank 0. Appends (a resumed run continues
  /// the same file).
  MetricsWriter(const std::string& path, bool is_main);
  bool active() const { return out_ != nullptr; }
  /// Adds kind, step, epoch, time_s, unix_time and run (this writer's run id: its start time
  /// and process id, so that `ddptrain plot` draws each run appended to a file as its own
  /// line) to the record and writes it as one line.
  void write(const char* kind, int64_t step, int epoch, nlohmann::json record);

 private:
  std::unique_ptr<std::ofstream> out_;
  std::string run_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

}  // namespace ddptrain
