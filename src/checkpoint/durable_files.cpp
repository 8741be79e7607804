#include "checkpoint/durable_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "util/error.h"
#include "util/files.h"

namespace ddptrain {
namespace fs = std::filesystem;
namespace {

void fsync_path(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags);
  DDP_CHECK(fd >= 0, "cannot open '", path, "' to fsync: ", std::strerror(errno));
  int rc = ::fsync(fd);
  ::close(fd);
  DDP_CHECK(rc == 0, "fsync of '", path, "' failed: ", std::strerror(errno));
}

}  // namespace

void write_file_synced(const std::string& path, const std::string& bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  DDP_CHECK(fd >= 0, "cannot create '", path, "': ", std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      throw Error(detail::concat("writing '", path, "' failed: ", std::strerror(e), " (disk full?)"));
    }
    done += static_cast<size_t>(n);
  }
  int rc = ::fsync(fd);
  ::close(fd);
  DDP_CHECK(rc == 0, "fsync of '", path, "' failed: ", std::strerror(errno));
}

// One allocation of the file's size and reads into it: a stream into a stringstream held two to
// three times the file (its buffer grown by doubling, then copied out), for every rank reading
// a checkpoint.
std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DDP_CHECK(fd >= 0, "cannot read '", path, "': missing or unreadable (", std::strerror(errno), ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {  // a pipe (<(...)): read as a stream
    ::close(fd);
    std::ifstream in(path, std::ios::binary);
    DDP_CHECK(in.good(), "cannot read '", path, "': missing or unreadable");
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  errno = 0;
  const bool read = read_fully_at(fd, bytes.data(), bytes.size(), 0);
  const int err = errno;
  ::close(fd);
  DDP_CHECK(read, "cannot read '", path, "' of ", st.st_size,
            " bytes: ", err != 0 ? std::strerror(err) : "it ended before them (changed while read?)");
  return bytes;
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  try {
    write_file_synced(tmp, bytes);
    fs::rename(tmp, path);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);  // a failed write leaves nothing behind
    throw;
  }
  fsync_folder(fs::path(path).parent_path().empty() ? "." : fs::path(path).parent_path().string());
}

void fsync_folder(const std::string& dir) { fsync_path(dir, O_RDONLY | O_DIRECTORY); }

}  // namespace ddptrain
