// Files that survive a crash or a power loss: written whole and fsynced, replaced by a rename,
// their folder fsynced after; and read whole into one buffer. The checkpoint's files, its
// folder's marks and exports go through them.
#pragma once

#include <string>

namespace ddptrain {

/// Writes bytes to path and fsyncs the file (not its folder). Error naming it on failure.
void write_file_synced(const std::string& path, const std::string& bytes);

/// Writes bytes to path via a temporary file, fsync and rename, then fsyncs the folder.
void write_file_atomic(const std::string& path, const std::string& bytes);

/// fsyncs a folder: the renames and removals in it survive a power loss. Error naming it.
void fsync_folder(const std::string& dir);

/// Reads a whole file; Error naming it when missing.
std::string read_file(const std::string& path);

}  // namespace ddptrain
