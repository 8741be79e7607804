// The error file of torchrun's contract (TORCHELASTIC_ERROR_FILE): {"message": {"message": ...,
// "extraInfo": {"timestamp": ..., ...}}}, which torchrun's and `ddptrain launch`'s reports read
// (launch/worker_exit.h). A failure's (tools/fatal_error.h) and a stop's (train/stop_record.h).
#pragma once

#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include "util/env.h"
#include "util/json_text.h"

namespace ddptrain {

/// Writes `message` and `extra` (torchrun's values are strings) with the time into the file the
/// environment names; nothing where it names none. Whole or not at all: written beside, then
/// renamed over it. torchrun's agent raises on an error file that is not whole JSON (its
/// errors/__init__.py), which ends the job with no restart: a worker killed mid-write, or a
/// full disk, left a truncated one. Written where it can be (a failing disk: none, and the
/// launcher reports the exit code alone).
inline void write_error_file(const std::string& message,
                             const std::vector<std::pair<std::string, std::string>>& extra) {
  const auto path = env::get("TORCHELASTIC_ERROR_FILE");
  if (!path || path->empty()) return;
  nlohmann::json info = {{"timestamp", std::to_string(std::time(nullptr))}};
  for (const auto& [key, value] : extra) info[key] = value;
  const nlohmann::json j = {{"message", {{"message", message}, {"extraInfo", info}}}};
  const std::string tmp = *path + ".tmp." + std::to_string(::getpid());
  bool whole = false;
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << json_text(j) << "\n";
    out.flush();
    whole = out.good();
  }
  if (!whole || std::rename(tmp.c_str(), path->c_str()) != 0) std::remove(tmp.c_str());
}

}  // namespace ddptrain
