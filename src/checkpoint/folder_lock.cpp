#include "checkpoint/folder_lock.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "util/error.h"

namespace ddptrain {

CheckpointFolderLock::CheckpointFolderLock(const std::string& dir, const Logger& log, bool restart) {
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    log.warn(str("cannot open ", path, " (", std::strerror(errno),
                 "): this run does not lock its checkpoint folder (Note [One run per checkpoint folder])"));
    return;
  }
  struct flock want {};
  want.l_type = F_WRLCK;
  want.l_whence = SEEK_SET;
  if (::fcntl(fd_, F_SETLK, &want) == 0) return;
  const int err = errno;
  if (err != EACCES && err != EAGAIN) {
    log.warn(str("cannot lock ", path, " (", std::strerror(err),
                 "): this run does not lock its checkpoint folder (Note [One run per checkpoint folder])"));
    return;
  }
  struct flock held = want;
  const bool known = ::fcntl(fd_, F_GETLK, &held) == 0 && held.l_type != F_UNLCK;
  ::close(fd_);
  fd_ = -1;
  const std::string holder = known ? str("process ", held.l_pid) : std::string("a process");
  if (restart) {
    log.warn(str(holder, " holds ", path, " at this restart (a previous attempt's, on a node that died?): ",
                 "this attempt goes on without the lock (Note [One run per checkpoint folder])"));
    return;
  }
  throw UsageError(str("checkpoint folder '", dir, "' is in use by another run (", holder, " holds ", path,
                       "): its saves in progress would be cleaned as leftovers. Wait for it to end, or give ",
                       "this run another checkpoint folder (Note [One run per checkpoint folder])"));
}

CheckpointFolderLock::~CheckpointFolderLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace ddptrain
