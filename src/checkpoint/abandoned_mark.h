// The mark of Note [A branch a run abandons] (train/abandoned_branch.h): <dir>/.abandoned.json
// names the checkpoints (folder names) in `dir` that a start of a run abandoned and has not
// moved into .superseded/ yet. Whatever picks a folder's newest checkpoint skips them: train's
// resume_from auto, eval's and export's --checkpoint <folder> (find_latest_checkpoint).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace ddptrain {

/// <dir>/.abandoned.json.
std::string abandoned_mark_file(const std::string& dir);

/// The names the mark holds; empty where there is none. An Error naming the file where it
/// cannot be read.
std::set<std::string> abandoned_checkpoints(const std::string& dir);

/// Whether the checkpoint at `checkpoint_dir` is one of `marked` (abandoned_checkpoints of its folder).
bool is_abandoned(const std::set<std::string>& marked, const std::string& checkpoint_dir);

/// Writes the mark (atomically): `names` abandoned by a start at `after_step` (-1: fresh).
void write_abandoned_mark(const std::string& dir, int64_t after_step, const std::vector<std::string>& names);

/// Removes the mark where there is one; an Error naming it where it cannot be removed.
void remove_abandoned_mark(const std::string& dir);

}  // namespace ddptrain
