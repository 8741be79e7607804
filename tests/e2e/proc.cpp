#include "proc.h"

#include "../common/free_port.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

namespace ddptrain::e2e {
namespace {

using Clock = std::chrono::steady_clock;

int decode(int status) {
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

[[noreturn]] void exec_child(const std::vector<std::string>& argv,
                             const std::map<std::string, std::string>& env) {
  ::setpgid(0, 0);
  for (const auto& [k, v] : env) {
    if (v.empty())
      ::unsetenv(k.c_str());
    else
      ::setenv(k.c_str(), v.c_str(), 1);
  }
  std::vector<char*> a;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  ::execvp(a[0], a.data());
  std::fprintf(stderr, "exec %s failed: %s\n", a[0], std::strerror(errno));
  ::_exit(127);
}

}  // namespace

ProcResult run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
               int timeout_s) {
  int p[2];
  if (::pipe(p) != 0) throw std::runtime_error("pipe failed");
  auto t0 = Clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(p[1], 1);
    ::dup2(p[1], 2);
    ::close(p[0]);
    ::close(p[1]);
    exec_child(argv, env);
  }
  ::close(p[1]);
  ProcResult r;
  bool open = true;
  int status = 0;
  bool reaped = false;
  while (open || !reaped) {
    if (Clock::now() - t0 > std::chrono::seconds(timeout_s) && !r.timed_out) {
      r.timed_out = true;
      ::kill(-pid, SIGKILL);
    }
    if (open) {
      pollfd pf{p[0], POLLIN, 0};
      if (::poll(&pf, 1, 100) > 0) {
        char buf[8192];
        ssize_t n = ::read(p[0], buf, sizeof(buf));
        if (n > 0)
          r.output.append(buf, static_cast<size_t>(n));
        else
          open = false;
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!reaped && ::waitpid(pid, &status, WNOHANG) == pid) reaped = true;
    // A grandchild holding the pipe must not hang the test after the child is gone.
    if (reaped && open && Clock::now() - t0 > std::chrono::seconds(timeout_s)) open = false;
  }
  ::close(p[0]);
  ::kill(-pid, SIGKILL);  // whatever the child left in its group
  r.exit_code = decode(status);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

pid_t spawn(const std::vector<std::string>& argv, const std::string& out_path,
            const std::map<std::string, std::string>& env) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    exec_child(argv, env);
  }
  return pid;
}

int wait_for(pid_t pid, int timeout_s) {
  auto t0 = Clock::now();
  int status = 0;
  while (Clock::now() - t0 < std::chrono::seconds(timeout_s)) {
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid) return decode(status);
    if (got < 0) return -1;  // not a child (any more): reaped by an earlier wait
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return -1;
}

std::vector<pid_t> wait_for_children(pid_t pid, size_t n, int timeout_s) {
  std::vector<pid_t> kids;
  auto t0 = Clock::now();
  while (kids.size() < n && Clock::now() - t0 < std::chrono::seconds(timeout_s)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    kids = children_of(pid);
  }
  return kids;
}

std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
  std::error_code ec;
  for (const auto& t : std::filesystem::directory_iterator(task_dir, ec)) {
    std::ifstream in(t.path() / "children");
    for (pid_t c; in >> c;) out.push_back(c);
  }
  return out;
}

bool alive(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;
  auto rp = stat.rfind(')');
  return rp != std::string::npos && rp + 2 < stat.size() && stat[rp + 2] != 'Z';
}

std::string environ_of(pid_t pid, const std::string& name) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string key = name + "=";
  size_t pos = 0;
  while (pos < all.size()) {
    size_t end = all.find('\0', pos);
    if (end == std::string::npos) end = all.size();
    if (all.compare(pos, key.size(), key) == 0) return all.substr(pos + key.size(), end - pos - key.size());
    pos = end + 1;
  }
  return "";
}

std::string python() { return DDPTRAIN_PYTHON; }

std::string binary() { return DDPTRAIN_BINARY; }
std::string source_dir() { return DDPTRAIN_SOURCE_DIR; }

int free_port() { return testing_common::free_port(); }

std::vector<std::string> lines_with(const std::string& output, const std::string& needle) {
  std::vector<std::string> out;
  std::istringstream in(output);
  for (std::string l; std::getline(in, l);)
    if (l.find(needle) != std::string::npos) out.push_back(l);
  return out;
}

std::string fresh_dir(const std::string& name) {
  std::string d = testing::TempDir() + "ddptrain_e2e_" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace ddptrain::e2e
