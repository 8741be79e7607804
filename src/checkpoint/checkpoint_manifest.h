// manifest.json, a checkpoint's list of its files with the size and CRC-32 of each: written by
// save_checkpoint, read by every reader of a checkpoint. Private to checkpoint/.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddptrain {

/// The manifest's file name in a checkpoint's folder.
inline constexpr const char* kManifest = "manifest.json";

/// A checkpoint's manifest. Error when it is missing, unreadable or of another format.
nlohmann::json read_manifest(const std::string& dir);

/// The files a manifest lists.
std::vector<std::string> listed_files(const nlohmann::json& manifest);

/// Each of `files` (listed by the manifest) is there with its size (no contents read).
void check_file_sizes(const std::string& dir, const nlohmann::json& manifest,
                      const std::vector<std::string>& files);

/// One file of the checkpoint, read once and checked against the manifest (its size and CRC-32);
/// nullopt when the manifest does not list it.
std::optional<std::string> read_checked(const std::string& dir, const std::string& file,
                                        const nlohmann::json& manifest);

}  // namespace ddptrain
