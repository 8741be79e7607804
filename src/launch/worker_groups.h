// The workers' process groups: each worker starts a session of its own, so its group holds what
// it started too (a script's program). The launcher signals groups, not pids, and ends an
// attempt only when every group is empty. Private to launch/.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <vector>

#include "launch/output_sink.h"

namespace ddptrain {

/// A worker as its process group sees it.
struct WorkerGroup {
  int rank = 0;
  pid_t pid = -1;       // the group's id, once the worker's setsid ran
  bool reaped = false;  // the launcher has reaped the worker itself
};

/// Signals each worker's process group: a script's program too; the worker alone before its
/// setsid ran (or where it left the group). in_teardown: also the group of a worker already
/// reaped, where its children live on (a script that SIGTERM ended while the program it ran
/// ignores it or is stuck: it held the port, the GPU and the folder's lock into the restart).
void signal_groups(const std::vector<WorkerGroup>& groups, int sig, bool in_teardown);

/// The ranks whose groups still hold a process; orphans of theirs reparented to the launcher
/// (when it is PID 1: a container's entrypoint) are reaped first, or their zombies would count.
std::vector<int> groups_left(const std::vector<WorkerGroup>& groups);

/// After a teardown, every worker reaped: what is left in their groups (a script's program) gets
/// until kill_at to end (the grace its signal gave: a save in progress), or less once
/// `signal_received` is set, then SIGKILL, and the launcher waits (at most 10 s) until none has a
/// process left, so that a restart or the launcher's exit leaves nothing of this attempt running.
void end_groups(const std::vector<WorkerGroup>& groups, std::chrono::steady_clock::time_point kill_at,
                const std::atomic<int>& signal_received, OutputSink& err);

}  // namespace ddptrain
