// Reading a checkpoint's folder without restoring it: verifying a checkpoint against its
// manifest, listing a root's checkpoints and choosing the newest that verifies.
#include "checkpoint/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "checkpoint/abandoned_mark.h"
#include "checkpoint/checkpoint_manifest.h"
#include "checkpoint/checkpoint_meta.h"
#include "checkpoint/durable_files.h"
#include "util/error.h"

namespace ddptrain {
namespace fs = std::filesystem;

namespace {

// `files` of the checkpoint (listed by its manifest) there with their sizes, then each read once
// and checked against the manifest; the checkpoint's meta.
CheckpointMeta verify_files(const std::string& dir, const nlohmann::json& manifest,
                            const std::vector<std::string>& files) {
  check_file_sizes(dir, manifest, files);
  std::optional<std::string> meta;
  for (const std::string& fname : files) {
    std::optional<std::string> bytes = read_checked(dir, fname, manifest);
    if (fname == "meta.json") meta = std::move(bytes);
  }
  return meta ? meta_from_json(*meta, dir) : read_checkpoint_meta(dir);
}

}  // namespace

CheckpointMeta verify_checkpoint(const std::string& dir) {
  const nlohmann::json manifest = read_manifest(dir);
  return verify_files(dir, manifest, listed_files(manifest));
}

namespace {

// What eval and export read of a checkpoint (the files the manifest lists of these).
std::vector<std::string> weight_files(const nlohmann::json& manifest) {
  std::vector<std::string> files;
  for (const char* fname : {"meta.json", "config.json", "model.pt"})
    if (manifest.at("files").contains(fname)) files.push_back(fname);
  return files;
}

}  // namespace

CheckpointMeta verify_checkpoint_weights(const std::string& dir) {
  const nlohmann::json manifest = read_manifest(dir);
  return verify_files(dir, manifest, weight_files(manifest));
}

CheckpointMeta check_checkpoint_complete(const std::string& dir, bool weights_only) {
  const nlohmann::json manifest = read_manifest(dir);
  check_file_sizes(dir, manifest, weights_only ? weight_files(manifest) : listed_files(manifest));
  return read_checkpoint_meta(dir);
}

bool is_checkpoint_dir(const std::string& dir) { return fs::exists(fs::path(dir) / kManifest); }

CheckpointMeta read_checkpoint_meta(const std::string& dir) {
  return meta_from_json(read_file(dir + "/meta.json"), dir);
}

std::vector<CheckpointEntry> list_checkpoints(const std::string& root, const Logger& log,
                                              std::vector<CheckpointEntry>* incomplete, bool weights_only) {
  std::vector<CheckpointEntry> complete;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return complete;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    if (!e.is_directory() || e.path().filename().string()[0] == '.') continue;
    const std::string dir = e.path().string();
    try {
      complete.push_back({dir, check_checkpoint_complete(dir, weights_only)});
    } catch (const std::exception& err) {
      log.warn(str("skipping an invalid checkpoint: ", err.what()));
      if (incomplete) try {
          incomplete->push_back({dir, read_checkpoint_meta(dir)});
        } catch (const std::exception&) {  // not a checkpoint whose run can be named
        }
    }
  }
  std::sort(complete.begin(), complete.end(), [](const CheckpointEntry& a, const CheckpointEntry& b) {
    return std::tie(a.meta.global_step, a.dir) < std::tie(b.meta.global_step, b.dir);
  });
  return complete;
}

const CheckpointEntry* newest_that_verifies(const std::vector<const CheckpointEntry*>& newest_first,
                                            const Logger& log, bool weights_only) {
  for (const CheckpointEntry* c : newest_first) {
    try {
      if (weights_only)
        verify_checkpoint_weights(c->dir);
      else
        verify_checkpoint(c->dir);
      return c;
    } catch (const std::exception& err) {
      log.warn(str("skipping an invalid checkpoint: ", err.what()));
    }
  }
  return nullptr;
}

std::optional<std::string> find_latest_checkpoint(const std::string& root, const Logger& log,
                                                  bool weights_only) {
  const auto all = list_checkpoints(root, log, nullptr, weights_only);
  const std::set<std::string> abandoned = abandoned_checkpoints(root);
  std::vector<const CheckpointEntry*> newest_first;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (!is_abandoned(abandoned, it->dir)) {
      newest_first.push_back(&*it);
      continue;
    }
    log.warn(str("skipping ", it->dir, ": a start of its run abandoned it (", abandoned_mark_file(root),
                 "; Note [A branch a run abandons]); name it to use it"));
  }
  const CheckpointEntry* newest = newest_that_verifies(newest_first, log, weights_only);
  if (!newest) return std::nullopt;
  return newest->dir;
}

}  // namespace ddptrain
