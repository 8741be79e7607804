#include "launch/worker_groups.h"

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <thread>

namespace ddptrain {

void signal_groups(const std::vector<WorkerGroup>& groups, int sig, bool in_teardown) {
  for (const auto& g : groups) {
    if (g.reaped && !in_teardown) continue;
    if (::kill(-g.pid, sig) != 0 && errno == ESRCH && !g.reaped) ::kill(g.pid, sig);
  }
}

std::vector<int> groups_left(const std::vector<WorkerGroup>& groups) {
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  std::vector<int> left;
  for (const auto& g : groups)
    if (::kill(-g.pid, 0) == 0) left.push_back(g.rank);
  return left;
}

void end_groups(const std::vector<WorkerGroup>& groups, std::chrono::steady_clock::time_point kill_at,
                const std::atomic<int>& signal_received, OutputSink& err) {
  while (!groups_left(groups).empty() && std::chrono::steady_clock::now() < kill_at &&
         signal_received.load() == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (const auto& g : groups) ::kill(-g.pid, SIGKILL);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    const std::vector<int> left = groups_left(groups);
    if (left.empty()) return;
    if (std::chrono::steady_clock::now() >= until) {
      for (int rank : left)
        say(err, "launch: processes of rank %d's group outlived SIGKILL by 10 s (in uninterruptible I/O?)\n",
            rank);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace ddptrain
