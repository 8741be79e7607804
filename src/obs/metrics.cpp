#include "obs/metrics.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include <filesystem>
#include <fstream>

#include "util/clock.h"
#include "util/error.h"
#include "util/files.h"
#include "util/json_text.h"

namespace ddptrain {

MetricsWriter::MetricsWriter(const std::string& path, bool is_main) {
  if (path.empty() || !is_main) return;
  create_parent_folder(path);
  // A line cut short (a run killed while writing it) gets its end, so this run's first record
  // starts a line of its own rather than making that one unreadable.
  bool cut = false;
  {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (in && in.tellg() > 0) {
      in.seekg(-1, std::ios::end);
      cut = in.get() != '\n';
    }
  }
  out_ = std::make_unique<std::ofstream>(path, std::ios::app);
  if (cut) *out_ << '\n';
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &utc);
  run_ = std::string(stamp) + "-" + std::to_string(::getpid());
  if (!out_->good())
    throw UsageError(str("cannot open the metrics file '", path, "' for writing (", std::strerror(errno),
                         "): give a --metrics_file this user can write"));
}

void MetricsWriter::write(const char* kind, int64_t step, int epoch, nlohmann::json record) {
  if (!out_) return;
  record["kind"] = kind;
  record["step"] = step;
  record["epoch"] = epoch;
  record["run"] = run_;
  record["time_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  record["unix_time"] = unix_seconds();
  *out_ << json_text(record) << '\n' << std::flush;
}

}  // namespace ddptrain
