#include "checkpoint/folder_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "util/error.h"

namespace ddptrain {
namespace {

// "pid host": who holds the lock, written by the holder once it has it.
std::string this_process() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return str(::getpid(), " ", host);
}

struct Holder {
  std::string name;
  bool alive_here = false;  // named on this host, and a process of that pid lives here
};

// The holder as the lock file names it: "process 123" (on this host), "process 123 on node7", or
// "another run" where the file is empty (its holder has not written it yet, or is an older
// ddptrain's, which wrote nothing).
Holder holder_named_in(int fd) {
  char buf[300] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  const std::string text = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  const auto space = text.find(' ');
  if (text.empty() || space == std::string::npos) return {"another run", false};
  const std::string pid = text.substr(0, space), host = text.substr(space + 1);
  const std::string mine = this_process();
  if (text == mine) return {str("this process (", pid, "), another of its runs,"), true};
  const bool here = host == mine.substr(mine.find(' ') + 1);
  // A host name is not always one machine's (a pod rescheduled under its name on another node,
  // containers that share the host's name): a pid that no process here has is another's.
  const long number = std::strtol(pid.c_str(), nullptr, 10);
  const bool alive = here && number > 0 && !(::kill(static_cast<pid_t>(number), 0) != 0 && errno == ESRCH);
  return {str("process ", pid, here ? std::string() : " on " + host), alive};
}

}  // namespace

CheckpointFolderLock::CheckpointFolderLock(const std::string& dir, const Logger& log, bool restart) {
  std::error_code made;
  std::filesystem::create_directories(dir, made);
  if (made)
    throw UsageError(str("cannot create checkpoint folder '", dir, "' (", made.message(),
                         "): give a folder this user can write"));
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
  if (::fcntl(fd_, F_OFD_SETLK, &want) == 0) {
    const std::string me = this_process();
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size()))
      log.warn(
          str("cannot write ", path, " (", std::strerror(errno), "): a run refused here names no holder"));
    return;
  }
  const int err = errno;
  if (err != EACCES && err != EAGAIN) {
    log.warn(str("cannot lock ", path, " (", std::strerror(err),
                 "): this run does not lock its checkpoint folder (Note [One run per checkpoint folder])"));
    ::close(fd_);
    fd_ = -1;
    return;
  }
  const Holder holder = holder_named_in(fd_);
  ::close(fd_);
  fd_ = -1;
  // A restart goes on past another node's holder (a previous attempt's, on a node that died: a
  // network filesystem may keep its lock), never past a live process on this host that holds it
  // (another job on the folder, which a restart under torchrun, whatever the first attempt's
  // exit code, would otherwise join).
  if (restart && !holder.alive_here) {
    log.warn(str(holder.name, " holds ", path,
                 " at this restart (a previous attempt's, on a node that died?): ",
                 "this attempt goes on without the lock (Note [One run per checkpoint folder])"));
    return;
  }
  throw UsageError(str("checkpoint folder '", dir, "' is in use by another run (", holder.name, " holds ",
                       path,
                       "): its saves in progress would be cleaned as leftovers. Wait for it to end, or give ",
                       "this run another checkpoint folder (Note [One run per checkpoint folder])"));
}

CheckpointFolderLock::~CheckpointFolderLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace ddptrain
