#include "checkpoint/checkpoint_manifest.h"

#include <filesystem>

#include "checkpoint/checkpoint_meta.h"
#include "checkpoint/crc32.h"
#include "checkpoint/durable_files.h"
#include "util/error.h"

namespace ddptrain {
namespace fs = std::filesystem;

// A checkpoint's manifest: the size and CRC-32 of each of its files. Error when it is missing,
// unreadable or of another format.
nlohmann::json read_manifest(const std::string& dir) {
  const std::string mpath = dir + "/" + kManifest;
  DDP_CHECK(fs::is_regular_file(mpath), "checkpoint '", dir, "' is incomplete: ", kManifest,
            " is missing (an interrupted save?)");
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(read_file(mpath));
  } catch (const nlohmann::json::exception& e) {
    throw Error(str("checkpoint '", dir, "': ", kManifest, " is corrupted (", e.what(), ")"));
  }
  DDP_CHECK(manifest.value("format", 0) == kCheckpointFormat, "checkpoint '", dir, "' has format ",
            manifest.value("format", 0), "; this ddptrain reads format ", kCheckpointFormat);
  DDP_CHECK(manifest.contains("files") && manifest["files"].is_object(), "checkpoint '", dir,
            "': ", kManifest, " lists no files");
  return manifest;
}

// The files a manifest lists.
std::vector<std::string> listed_files(const nlohmann::json& manifest) {
  std::vector<std::string> files;
  for (const auto& [fname, entry] : manifest.at("files").items()) files.push_back(fname);
  return files;
}

// Each of `files` (listed by the manifest) is there with its size (no contents read).
void check_file_sizes(const std::string& dir, const nlohmann::json& manifest,
                      const std::vector<std::string>& files) {
  for (const std::string& fname : files) {
    const std::string path = dir + "/" + fname;
    DDP_CHECK(fs::is_regular_file(path), "checkpoint '", dir, "': ", fname, " is missing");
    const uint64_t want = manifest.at("files").at(fname).at("bytes").get<uint64_t>(),
                   have = fs::file_size(path);
    DDP_CHECK(have == want, "checkpoint '", dir, "': ", fname, " has ", have, " bytes but the manifest says ",
              want, " (truncated or replaced)");
  }
}

// One file of the checkpoint, read once and checked against the manifest (its size and CRC-32);
// nullopt when the manifest does not list it.
std::optional<std::string> read_checked(const std::string& dir, const std::string& file,
                                        const nlohmann::json& manifest) {
  const nlohmann::json& files = manifest.at("files");
  if (!files.contains(file)) return std::nullopt;
  const std::string bytes = read_file(dir + "/" + file);
  const uint64_t want = files[file].at("bytes").get<uint64_t>();
  DDP_CHECK(bytes.size() == want, "checkpoint '", dir, "': ", file, " has ", bytes.size(),
            " bytes but the manifest says ", want, " (truncated or replaced)");
  DDP_CHECK(crc32_matches(bytes, files[file].at("crc32").get<uint32_t>()), "checkpoint '", dir, "': ", file,
            " fails its CRC-32 check (corrupted)");
  return bytes;
}

}  // namespace ddptrain
