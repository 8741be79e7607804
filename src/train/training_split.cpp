#include "train/training_split.h"

#include "util/error.h"

namespace ddptrain {
namespace {

const char* const kKey = "training_split";

}  // namespace

nlohmann::json training_split_record(const Dataset& train) {
  const DatasetShape s = train.shape();
  nlohmann::json j = {{"channels", s.channels},
                      {"height", s.height},
                      {"width", s.width},
                      {"classes", s.num_classes},
                      {"block_size", s.block_size}};
  if (s.float_targets) j["float_targets"] = *s.float_targets;  // where the dataset says
  if (const std::vector<std::string> names = train.label_names(); !names.empty()) j["label_names"] = names;
  return j;
}

std::optional<TrainingSplit> recorded_training_split(const CheckpointMeta& meta) {
  if (!meta.extra.contains(kKey)) return std::nullopt;
  try {
    const nlohmann::json& j = meta.extra.at(kKey);
    TrainingSplit t;
    t.shape = {j.at("channels").get<int>(), j.at("height").get<int>(), j.at("width").get<int>(),
               j.at("classes").get<int>(), j.at("block_size").get<int>()};
    if (j.contains("label_names")) t.label_names = j.at("label_names").get<std::vector<std::string>>();
    if (j.contains("float_targets")) t.shape.float_targets = j.at("float_targets").get<bool>();
    return t;
  } catch (const nlohmann::json::exception& e) {
    throw Error(str("meta.json's \"", kKey, "\" is not a record of a training split (", e.what(), ")"));
  }
}

}  // namespace ddptrain
