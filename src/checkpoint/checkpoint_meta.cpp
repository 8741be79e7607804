#include "checkpoint/checkpoint_meta.h"
#include "util/json_text.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

namespace ddptrain {
namespace {

// Checkpoints older than meta.json's batch_size (before 2026-11-30) keep the batch size of their
// position in config.json (the CLI's --batch_size, per rank: a config.json of the CLI's flags,
// which also has "dataset" and "model"); otherwise (a program's own config.json) it stays 0:
// this run's.
int batch_size_in_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return 0;
  const auto c = nlohmann::json::parse(read_file(path), nullptr, /*allow_exceptions=*/false);
  if (!c.is_object() || !c.contains("dataset") || !c.contains("model") || !c.contains("batch_size") ||
      !c["batch_size"].is_number_integer())
    return 0;
  return std::max(0, c["batch_size"].get<int>());
}

}  // namespace

std::string meta_json(const CheckpointMeta& meta, int64_t rng_state_bytes) {
  nlohmann::json m = {{"format", kCheckpointFormat},
                      {"epoch", meta.epoch},
                      {"batches_done", meta.batches_done},
                      {"epoch_complete", meta.epoch_complete},
                      {"global_step", meta.global_step},
                      {"world_size", meta.world_size},
                      {"seed", meta.seed},
                      {"rng_state_bytes", rng_state_bytes}};
  if (!meta.precision.empty()) m["precision"] = meta.precision;
  if (!meta.run.empty()) m["run"] = meta.run;
  if (meta.batch_size > 0) m["batch_size"] = meta.batch_size;
  if (meta.extra.is_object())
    for (const auto& [key, value] : meta.extra.items())
      if (!m.contains(key)) m[key] = value;
  return json_text(m, 2) + "\n";
}

CheckpointMeta meta_from_json(const std::string& text, const std::string& dir) {
  auto m = nlohmann::json::parse(text);
  CheckpointMeta meta;
  meta.epoch = m.at("epoch").get<int>();
  meta.batches_done = m.at("batches_done").get<int64_t>();
  meta.epoch_complete = m.at("epoch_complete").get<bool>();
  meta.global_step = m.at("global_step").get<int64_t>();
  meta.world_size = m.at("world_size").get<int>();
  meta.seed = m.at("seed").get<int64_t>();
  static const std::set<std::string> kOwn = {"format",      "epoch",      "batches_done", "epoch_complete",
                                             "global_step", "world_size", "seed",         "rng_state_bytes",
                                             "precision",   "run",        "batch_size"};
  for (const auto& [key, value] : m.items())
    if (!kOwn.count(key)) meta.extra[key] = value;
  meta.precision = m.value("precision", "");
  if (m.contains("run")) meta.run = m["run"].get<std::map<std::string, std::string>>();
  meta.batch_size = m.contains("batch_size") ? m["batch_size"].get<int>() : batch_size_in_config(dir);
  return meta;
}

}  // namespace ddptrain
