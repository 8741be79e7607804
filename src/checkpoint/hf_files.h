// The file names of a Hugging Face model folder (save_pretrained's), without LibTorch: the
// options' checks (ddpbase) tell such a folder from a file or a ddptrain checkpoint.
#pragma once

#include <filesystem>
#include <string>

namespace ddptrain {

inline constexpr const char* kHfConfig = "config.json";
inline constexpr const char* kHfSingle = "model.safetensors";
inline constexpr const char* kHfIndex = "model.safetensors.index.json";

/// A folder holding config.json and model.safetensors or its index (what `init_from` takes as a
/// Hugging Face checkpoint; a ddptrain checkpoint has a config.json but no safetensors).
inline bool is_hf_folder(const std::string& dir) {
  const std::filesystem::path root(dir);
  return std::filesystem::is_regular_file(root / kHfConfig) &&
         (std::filesystem::is_regular_file(root / kHfSingle) ||
          std::filesystem::is_regular_file(root / kHfIndex));
}

}  // namespace ddptrain
