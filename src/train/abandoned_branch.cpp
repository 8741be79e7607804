#include "train/abandoned_branch.h"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <set>
#include <vector>

#include "checkpoint/abandoned_mark.h"
#include "checkpoint/checkpoint.h"
#include "dist/every_rank.h"
#include "util/error.h"
#include "util/strings.h"

namespace ddptrain {
namespace {

namespace fs = std::filesystem;

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

}  // namespace

void mark_abandoned_branch(const std::string& dir, int64_t after_step, const DistContext& ctx) {
  if (dir.empty()) return;
  const auto mark = [&] {
    if (!ctx.is_main()) return;
    const std::vector<CheckpointEntry> later = later_than(dir, after_step, ctx.log());
    if (later.empty()) return remove_abandoned_mark(dir);
    std::vector<std::string> names;
    std::string listed;
    for (const CheckpointEntry& c : later) {
      names.push_back(fs::path(c.dir).filename().string());
      listed += str(listed.empty() ? "" : ", ", names.back());
    }
    write_abandoned_mark(dir, after_step, names);
    ctx.log().info(
        str(start_words(after_step), "the later checkpoints of this run's before (", listed,
            ") are marked abandoned in ", abandoned_mark_file(dir), ": auto skips them, and they ",
            "move to .superseded/ once the run has checked they are its own (Note [A branch a run ",
            "abandons])"));
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
    remove_abandoned_mark(dir);  // before the first save, which may take a name the mark holds
  };
  on_every_rank(ctx, "checkpoints of later steps set aside", move_later, [&](int64_t) {
    return str("rank 0 could not set aside the checkpoints of later steps in ", dir, " (its log says why)");
  });
}

void drop_mark_of_another_run(const std::string& dir, const RunIdentity& identity, const Logger& log) {
  try {
    const std::set<std::string> marked = abandoned_checkpoints(dir);
    for (const CheckpointEntry& c : list_checkpoints(dir, log)) {
      if (!is_abandoned(marked, c.dir) || identity_differences(identity, c.meta.run).empty()) continue;
      remove_abandoned_mark(dir);
      log.info(
          str(c.dir, " is another run's: ", abandoned_mark_file(dir), " removed (this start moved nothing)"));
      return;
    }
  } catch (const std::exception& e) {
    log.warn(str(e.what(), " (a refused run's mark: auto skips the checkpoints it names)"));
  }
}

}  // namespace ddptrain
