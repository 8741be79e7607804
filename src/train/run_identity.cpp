#include "train/run_identity.h"

namespace ddptrain {

std::vector<std::string> identity_differences(const RunIdentity& mine, const RunIdentity& theirs,
                                              const std::string& name_prefix) {
  std::vector<std::string> out;
  for (const auto& [name, value] : mine) {
    auto it = theirs.find(name);
    if (it != theirs.end() && it->second != value)
      out.push_back((name.find(' ') == std::string::npos ? name_prefix + name : name) + " " + value +
                    " (the checkpoint's: " + it->second + ")");
  }
  return out;
}

}  // namespace ddptrain
