#include "train/abandoned_branch.h"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "dist/every_rank.h"
#include "util/error.h"
#include "util/strings.h"

namespace ddptrain {
namespace {

namespace fs = std::filesystem;

std::string mark_file(const std::string& dir) { return (fs::path(dir) / ".abandoned.json").string(); }

// Rank 0's listing decides: the complete checkpoints of steps after `after_step`.
std::vector<CheckpointEntry> later_than(const std::string& dir, int64_t after_step, const Logger& log) {
  std::vector<CheckpointEntry> later;
  for (CheckpointEntry& c : list_checkpoints(dir, log))
    if (c.meta.global_step > after_step) later.push_back(std::move(c));
  return later;
}

std::string start_words(int64_t after_step) {
  return str("this run starts at step ", std::max<int64_t>(after_step, 0), "; ");
}

void remove_mark(const std::string& dir) {
  std::error_code ec;
  fs::remove(mark_file(dir), ec);
  if (ec)
    throw Error(str("cannot remove ", mark_file(dir), ": ", ec.message(), "; delete it, then start again"));
}

}  // namespace

std::set<std::string> abandoned_checkpoints(const std::string& dir) {
  const std::string file = mark_file(dir);
  std::error_code ec;
  if (dir.empty() || !fs::exists(file, ec)) return {};
  std::set<std::string> names;
  try {
    const nlohmann::json mark = nlohmann::json::parse(read_file(file));
    for (const auto& n : mark.at("checkpoints")) names.insert(n.get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    throw Error(str(file, " (the checkpoints a run abandoned) cannot be read: ", e.what(),
                    "; delete it (then resume_from auto may resume them), or name the checkpoint to resume"));
  }
  return names;
}

void mark_abandoned_branch(const std::string& dir, int64_t after_step, const DistContext& ctx) {
  if (dir.empty()) return;
  const auto mark = [&] {
    if (!ctx.is_main()) return;
    const std::vector<CheckpointEntry> later = later_than(dir, after_step, ctx.log());
    if (later.empty()) return remove_mark(dir);
    nlohmann::json names = nlohmann::json::array();
    std::string listed;
    for (const CheckpointEntry& c : later) {
      names.push_back(fs::path(c.dir).filename().string());
      listed += str(listed.empty() ? "" : ", ", names.back().get<std::string>());
    }
    write_file_atomic(mark_file(dir),
                      nlohmann::json{{"after_step", after_step}, {"checkpoints", names}}.dump(1));
    ctx.log().info(
        str(start_words(after_step), "the later checkpoints of this run's before (", listed,
            ") are marked abandoned in ", mark_file(dir), ": auto skips them, and they move to ",
            ".superseded/ once the run has checked they are its own (Note [A branch a run abandons])"));
  };
  on_every_rank(ctx, "the checkpoints of later steps marked abandoned", mark, [&](int64_t) {
    return str("rank 0 could not mark the checkpoints of later steps in ", dir, " (its log says why)");
  });
}

void set_aside_later_checkpoints(const std::string& dir, int64_t after_step, const DistContext& ctx) {
  // Rank 0's listing decides what moves; every rank meets the all-reduce, whatever its own
  // listing shows (rank 0 may have moved them already, or another node's folder holds none).
  const auto move_later = [&] {
    if (!ctx.is_main()) return;
    const auto stamp = std::to_string(std::time(nullptr));
    for (const CheckpointEntry& c : later_than(dir, after_step, ctx.log())) {
      const fs::path from(c.dir), aside = fs::path(dir) / ".superseded";
      fs::path to = aside / (from.filename().string() + "." + stamp);
      std::error_code ec;
      for (int n = 1; fs::exists(to, ec); ++n)
        to = aside / (from.filename().string() + "." + stamp + "." + std::to_string(n));
      fs::create_directories(to.parent_path(), ec);
      fs::rename(from, to, ec);
      if (ec)
        throw Error(str("cannot move ", c.dir, " (step ", c.meta.global_step,
                        ", later than this run starts at) ", "out of the way to ", to.string(), ": ",
                        ec.message(), "; move or delete it, then start again"));
      ctx.log().warn(str(start_words(after_step), c.dir, " (step ", c.meta.global_step,
                         ", a later step of this run's before) moved to ", to.string(),
                         ": neither resumed nor rotated (Note [A branch a run abandons])"));
    }
    remove_mark(dir);  // before the first save, which may take a name the mark holds
  };
  on_every_rank(ctx, "checkpoints of later steps set aside", move_later, [&](int64_t) {
    return str("rank 0 could not set aside the checkpoints of later steps in ", dir, " (its log says why)");
  });
}

void drop_abandoned_mark(const std::string& dir, const Logger& log) {
  try {
    if (!dir.empty()) remove_mark(dir);
  } catch (const std::exception& e) {
    log.warn(str(e.what(), " (a refused run's mark: auto skips the checkpoints it names)"));
  }
}

}  // namespace ddptrain
