#include "checkpoint/abandoned_mark.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "util/error.h"
#include "util/json_text.h"
#include "util/strings.h"

namespace ddptrain {

std::string abandoned_mark_file(const std::string& dir) {
  return (std::filesystem::path(dir) / ".abandoned.json").string();
}

std::set<std::string> abandoned_checkpoints(const std::string& dir) {
  const std::string file = abandoned_mark_file(dir);
  std::error_code ec;
  if (dir.empty() || !std::filesystem::exists(file, ec)) return {};
  std::set<std::string> names;
  try {
    const nlohmann::json mark = nlohmann::json::parse(read_file(file));
    for (const auto& n : mark.at("checkpoints")) names.insert(n.get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    throw Error(str(file, " (the checkpoints a start of a run abandoned) cannot be read: ", e.what(),
                    "; delete it (then the folder's newest checkpoint is resumed or read again), or name the "
                    "checkpoint to use"));
  }
  return names;
}

bool is_abandoned(const std::set<std::string>& marked, const std::string& checkpoint_dir) {
  return marked.count(std::filesystem::path(checkpoint_dir).filename().string()) != 0;
}

void write_abandoned_mark(const std::string& dir, int64_t after_step, const std::vector<std::string>& names) {
  write_file_atomic(abandoned_mark_file(dir),
                    json_text(nlohmann::json{{"after_step", after_step}, {"checkpoints", names}}, 1));
}

void remove_abandoned_mark(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove(abandoned_mark_file(dir), ec);
  if (ec)
    throw Error(
        str("cannot remove ", abandoned_mark_file(dir), ": ", ec.message(), "; delete it, then start again"));
}

}  // namespace ddptrain
