// Small file-system helpers: the writers of output files, and the readers of shards.
#pragma once

#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "util/error.h"

namespace ddptrain {

/// Creates an output folder (and those above it); UsageError naming `what` (e.g. "the metrics
/// file's folder"), the folder and the reason when it cannot be made.
inline void create_output_folder(const std::string& dir, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw UsageError(detail::concat("cannot create ", what, " '", dir, "' (", ec.message(),
                                    "): give a path this user can write"));
}

/// Creates the folder an output file will go in (nothing for a bare file name), as every
/// output flag promises: --metrics_file, export --out, plot -o.
inline void create_parent_folder(const std::string& file) {
  const std::filesystem::path parent = std::filesystem::path(file).parent_path();
  if (!parent.empty()) create_output_folder(parent.string(), "the folder of '" + file + "'");
}

/// The files a pattern names (glob(3), sorted by name; a plain path names itself, also one with
/// glob's characters in its name: 'train[1].bin'). UsageError naming the pattern when it matches
/// nothing; `example` is a pattern that would.
inline std::vector<std::string> files_matching(const std::string& pattern, const char* kind,
                                               const char* example) {
  struct stat st {};
  if (::stat(pattern.c_str(), &st) == 0 && S_ISREG(st.st_mode)) return {pattern};
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> files;
  for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  DDP_USAGE_CHECK(!files.empty(), "'", pattern, "' matches no file; give a ", kind,
                  " or a pattern of them (e.g. '", example, "')");
  std::sort(files.begin(), files.end());
  return files;
}

/// The first of `a`'s files that is also one of `b`'s (the same file by device and inode, however
/// it is named), or "" when they share none.
inline std::string first_file_in_both(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::set<std::pair<dev_t, ino_t>> in_b;  // each file stat()ed once (shard sets are long)
  struct stat st {};
  for (const std::string& y : b)
    if (::stat(y.c_str(), &st) == 0) in_b.insert({st.st_dev, st.st_ino});
  for (const std::string& x : a)
    if (::stat(x.c_str(), &st) == 0 && in_b.count({st.st_dev, st.st_ino}) != 0) return x;
  return "";
}

/// Reads `size` bytes at `offset` of the open file `fd`, however the kernel splits the read;
/// false when the file ends first or the read fails (errno says why).
inline bool read_fully_at(int fd, void* out, size_t size, int64_t offset) {
  auto* p = static_cast<char*>(out);
  while (size > 0) {
    const ssize_t got = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    size -= static_cast<size_t>(got);
    offset += got;
  }
  return true;
}

}  // namespace ddptrain
