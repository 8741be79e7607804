// Small file-system helpers shared by the writers of output files.
#pragma once

#include <filesystem>
#include <string>

namespace ddptrain {

/// Creates the folder an output file will go in (nothing for a bare file name), as every
/// output flag promises: --metrics_file, export --out, plot -o.
inline void create_parent_folder(const std::string& file) {
  const std::filesystem::path parent = std::filesystem::path(file).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
}

}  // namespace ddptrain
