#include "checkpoint/folder_lock.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "util/error.h"

namespace ddptrain {
namespace {

// This kernel's boot id: one per machine and boot, whatever the host's name (containers that
// share the host's name share it too: one kernel, whose locks are the kernel's).
std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

// "pid host boot_id": who holds the lock, written by the holder once it has it.
std::string this_process() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return str(::getpid(), " ", host, " ", boot_id());
}

struct Holder {
  std::string name;
  bool alive_here = false;  // held under this kernel: a live process holds it
};

// The holder as the lock file names it: "process 123" (on this host), "process 123 on node7", or
// "another run" where the file is empty (its holder has not written it yet, or is an older
// ddptrain's, which wrote nothing).
Holder holder_named_in(int fd) {
  char buf[400] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::istringstream text(n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string());
  std::string pid, host, boot;
  if (!(text >> pid >> host)) return {"another run", false};
  text >> boot;  // none in the files of older ddptrains
  std::istringstream me(this_process());
  std::string my_pid, my_host, my_boot;
  me >> my_pid >> my_host >> my_boot;
  // A lock held under this very kernel has a live holder (the kernel drops a dead process's).
  // The same host name under another boot id is another machine (a pod rescheduled under its
  // name on another node) or a boot since: a holder that may be dead, as another host's.
  const bool here = host == my_host;
  const bool this_kernel = here && (boot.empty() || boot == my_boot);
  if (this_kernel && pid == my_pid) return {str("this process (", pid, "), another of its runs,"), true};
  return {str("process ", pid, here ? std::string() : " on " + host,
              here && !this_kernel ? " (another boot)" : ""),
          this_kernel};
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
