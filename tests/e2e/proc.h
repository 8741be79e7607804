// Runs real processes for the end-to-end tests: output captured, a hard timeout, and the
// whole process group killed on timeout so that no test leaves processes behind.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace ddptrain::e2e {

struct ProcResult {
  int exit_code = -1;  // 128 + signal when killed by a signal
  bool timed_out = false;
  std::string output;  // stdout and stderr, interleaved
  double seconds = 0;
};

/// Runs argv with extra environment variables; kills it after timeout_s.
ProcResult run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
               int timeout_s = 300);

/// Starts argv in the background in its own process group, output to out_path.
pid_t spawn(const std::vector<std::string>& argv, const std::string& out_path,
            const std::map<std::string, std::string>& env = {});

/// Waits up to timeout_s for pid; returns its exit code (128+signal), or -1 on timeout or at
/// once when pid is no child (an earlier wait reaped it).
int wait_for(pid_t pid, int timeout_s);

/// Direct children of pid (from /proc).
std::vector<pid_t> children_of(pid_t pid);

/// Polls until pid has n children (or timeout_s passes); returns them.
std::vector<pid_t> wait_for_children(pid_t pid, size_t n, int timeout_s = 10);

/// Whether a process exists (and is not a zombie).
bool alive(pid_t pid);

/// One variable of a process's environment, "" when absent.
std::string environ_of(pid_t pid, const std::string& name);

/// The Python with torch (1.13 or 2.x) that the interop tests talk to (CMake DDPTRAIN_PYTHON).
std::string python();

/// The binary under test and the source tree.
std::string binary();
std::string source_dir();

/// A TCP port that was free a moment ago.
int free_port();

/// Lines of `output` containing `needle`.
std::vector<std::string> lines_with(const std::string& output, const std::string& needle);

/// A fresh empty directory under the test temp dir.
std::string fresh_dir(const std::string& name);

}  // namespace ddptrain::e2e
