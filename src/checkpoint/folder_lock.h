// Note [One run per checkpoint folder]
// A second run started on a folder a run is saving into would clean the first's save in
// progress as an interrupted one's leftovers (its .tmp-<name> folder, an .old-<name> being
// replaced), and the first run then fails at its next write and loses what it trained since
// its last checkpoint. So a run's rank 0 holds a lock on <dir>/.lock (a checkpoint folder's
// listing and rotation skip names that start with a dot; the file says which process holds
// it) from before it cleans anything until the run ends (the CLI's process; a library
// program's Trainer, or the CheckpointFolderClaim it was given: train/folder_claim.h), and a
// run that finds it held stops with exit 2 naming the process that holds it. The lock is the
// open file's (Linux's F_OFD_SETLK), not the process's: a second run in the same process (two
// Trainers) is refused as another process's is, and closing another descriptor of the file
// does not drop it (a POSIX lock would be dropped). The kernel drops it when the holder
// closes it or ends, however it ends (a kill, a crash); on a network filesystem a node that
// died holds it until its lease ends (NFSv4: about 90 s), so a restart of the job (whose
// previous attempt's workers the launcher or torchrun's agent has ended; as the job's ranks
// agree: any rank's launcher counted one, or the torchrun job started again, train/folder_claim.cpp)
// goes on without the lock, saying so. A filesystem without locks (some network mounts) gets a warning and no
// lock.
#pragma once

#include <string>

#include "obs/logger.h"

namespace ddptrain {

class CheckpointFolderLock {
 public:
  /// Takes the lock on `dir`/.lock (creating the folder and the file); UsageError naming the
  /// holder's process when another run holds it, or with `restart` a warning and no lock.
  CheckpointFolderLock(const std::string& dir, const Logger& log, bool restart = false);
  ~CheckpointFolderLock();
  CheckpointFolderLock(const CheckpointFolderLock&) = delete;
  CheckpointFolderLock& operator=(const CheckpointFolderLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace ddptrain
