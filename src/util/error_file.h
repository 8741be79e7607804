// The error file of torchrun's contract (TORCHELASTIC_ERROR_FILE): {"message": {"message": ...,
// "extraInfo": {"timestamp": ..., ...}}}, which torchrun's and `ddptrain launch`'s reports read
// (launch/worker_exit.h). A failure's (tools/fatal_error.h) and a stop's (train/stop_record.h).
#pragma once

#include <ctime>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/env.h"
#include "util/json_text.h"

namespace ddptrain {

/// Writes `message` and `extra` (torchrun's values are strings) with the time into the file the
/// environment names; nothing where it names none.
inline void write_error_file(const std::string& message,
                             const std::vector<std::pair<std::string, std::string>>& extra) {
  const auto path = env::get("TORCHELASTIC_ERROR_FILE");
  if (!path) return;
  nlohmann::json info = {{"timestamp", std::to_string(std::time(nullptr))}};
  for (const auto& [key, value] : extra) info[key] = value;
  const nlohmann::json j = {{"message", {{"message", message}, {"extraInfo", info}}}};
  std::ofstream(*path) << json_text(j) << "\n";
}

}  // namespace ddptrain
