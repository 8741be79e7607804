// The members of a tar archive, read from its headers alone (no member's data): the index a
// WebDataset shard is read by (data/webdataset.h). No LibTorch here: the fuzz loop calls it.
// Formats: POSIX ustar (its prefix field), GNU (long names in 'L' members, base-256 sizes),
// pax (per-member 'path' and 'size' records) and old v7 headers: what Python's tarfile, GNU tar
// and webdataset's TarWriter write, read as Python's tarfile reads them (stacked long-name or
// pax headers: the first wins; an old-style file named "x/" is a folder). Two deliberate
// differences: the prefix field counts only under POSIX's magic (GNU headers keep other
// fields there), and what tarfile would end the archive at without a word (a damaged header
// after the first, a global pax header setting a path or size) is an error here. Only
// regular files are members; folders, links and devices are passed over, as webdataset does.
// Every header's checksum is checked; anything the reader cannot place (a bad checksum, a
// number that is not one, a member or header cut short by the file's end, a long name or pax
// header with no member after it, a compressed archive, a sparse file) is a UsageError naming
// the archive, the byte offset and the reason, never a crash.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddptrain {

struct TarMember {
  std::string name;    // the path inside the archive, as stored ("./" and all)
  int64_t offset = 0;  // of its data in the archive
  int64_t size = 0;    // of its data, in bytes
};

/// The regular files of the archive at `path`, in archive order. The archive ends at its first
/// zero block or at the end of the file.
std::vector<TarMember> tar_members(const std::string& path);

}  // namespace ddptrain
