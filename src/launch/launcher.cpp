#include "launch/launcher.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include "launch/launch_dir.h"
#include "launch/line_pump.h"
#include "launch/output_sink.h"
#include "launch/stall_watch.h"
#include "launch/worker_exit.h"
#include "launch/worker_groups.h"
#include "launch/worker_process.h"
#include "util/error.h"

namespace ddptrain {

namespace {

// The only process-wide state of the launcher: the last forwarded signal, set by the handler.
std::atomic<int> g_signal{0};
void on_signal(int sig) { g_signal.store(sig); }

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  int out_fd = -1, err_fd = -1;
  std::unique_ptr<LinePump> out, err;
  bool exited = false;
  int status = 0;
};

// The launcher's stdout and stderr (Note [The launcher's output never holds the launcher]).
struct Outputs {
  OutputSink out{1}, err{2};
};

// What is queued goes out, for a few seconds at most: a reader that stopped reading does not
// keep the exit code from whoever waits for it (Note [The launcher's output never holds the
// launcher]).
void drain_for_a_few_seconds(Outputs& io) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (OutputSink* sink : {&io.out, &io.err})
    sink->drain(std::chrono::duration_cast<std::chrono::milliseconds>(
        std::max(deadline - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration::zero())));
}

struct GroupResult {
  int first_failed = -1;  // rank, or -1
  std::string stall;      // a stall the launcher saw (then message is the flight verdict)
  pid_t failed_pid = -1;
  int status = 0;
  int forwarded = 0;    // a signal the launcher received and forwarded
  int interrupted = 0;  // a signal received while the workers were being stopped: no restart
  int stopped = 0;      // a signal the workers stopped on that the launcher did not forward
  std::string message;  // the failed worker's error, from its error file; or the stop's record
};

// Starts the local workers of one attempt, each with the torchrun contract in its environment.
std::vector<Worker> spawn_workers(const LaunchOptions& o, const std::string& self_exe,
                                  const std::vector<std::string>& worker_args, int restart_count,
                                  const std::string& error_dir, Outputs& io) {
  const int world = o.nproc_per_node * o.nnodes;
  std::vector<Worker> workers(static_cast<size_t>(o.nproc_per_node));
  for (int lr = 0; lr < o.nproc_per_node; ++lr) {
    Worker& w = workers[static_cast<size_t>(lr)];
    w.rank = o.node_rank * o.nproc_per_node + lr;
    std::vector<std::pair<std::string, std::string>> env = {
        {"RANK", std::to_string(w.rank)},
        {"LOCAL_RANK", std::to_string(lr)},
        {"WORLD_SIZE", std::to_string(world)},
        {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
        {"GROUP_RANK", std::to_string(o.node_rank)},
        {"MASTER_ADDR", o.master_addr},
        {"MASTER_PORT", std::to_string(o.master_port)},
        {"ROLE_RANK", std::to_string(w.rank)},  // torchrun's, with its one role
        {"ROLE_NAME", "default"},
        {"ROLE_WORLD_SIZE", std::to_string(world)},
        {"GROUP_WORLD_SIZE", std::to_string(o.nnodes)},
        {"TORCHELASTIC_RUN_ID", "none"},
        {"TORCHELASTIC_MAX_RESTARTS", std::to_string(o.max_restarts)},
        {"TORCHELASTIC_USE_AGENT_STORE", "False"},  // rank 0 serves the store (not an outer torchrun's)
        {"TORCHELASTIC_RESTART_COUNT", std::to_string(restart_count)},
        {"DDPTRAIN_STOP_GRACE_S", std::to_string(o.signal_grace_s)},
        {"TORCHELASTIC_ERROR_FILE", error_file_of(error_dir, w.rank)},
    };
    ::unlink(env.back().second.c_str());
    if (o.stall_s > 0)
      env.emplace_back("DDPTRAIN_LAUNCH_DIR", error_dir);  // Note [Stall seen by the launcher]
    env.insert(env.end(), o.worker_env.begin(), o.worker_env.end());
    w.pid = spawn_worker_process(self_exe, worker_args, env, &w.out_fd, &w.err_fd);
    std::string prefix = "[" + std::to_string(w.rank) + "] ";
    w.out = std::make_unique<LinePump>(prefix, io.out);
    w.err = std::make_unique<LinePump>(prefix, io.err);
  }
  return workers;
}

// Waits up to 100 ms for output, then moves what arrived through each worker's line pumps
// (closing a pipe at its end). A pump whose output is backed up is not read until it drains
// (Note [The launcher's output never holds the launcher]).
void pump_output(std::vector<Worker>& workers) {
  std::vector<pollfd> fds;
  for (auto& w : workers) {
    if (w.out_fd >= 0 && !w.out->backed_up()) fds.push_back({w.out_fd, POLLIN, 0});
    if (w.err_fd >= 0 && !w.err->backed_up()) fds.push_back({w.err_fd, POLLIN, 0});
  }
  if (!fds.empty())
    ::poll(fds.data(), fds.size(), 100);
  else
    ::usleep(50 * 1000);
  for (auto& w : workers) {
    for (auto [fd, pump] : {std::pair{&w.out_fd, w.out.get()}, std::pair{&w.err_fd, w.err.get()}}) {
      if (*fd < 0 || pump->backed_up()) continue;
      pollfd p{*fd, POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) continue;
      char buf[8192];
      ssize_t n = ::read(*fd, buf, sizeof(buf));
      if (n > 0) {
        pump->feed(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        pump->flush();
        ::close(*fd);
        *fd = -1;
      }
    }
  }
}

// Where one attempt's teardown stands.
struct Teardown {
  int first_failed = -1;
  std::vector<int> failure_order;  // ranks that failed, in the order reaped
  int forwarded = 0;               // a signal received and forwarded
  int interrupted = 0;             // a signal received during a failure's teardown
  int stopped = 0;                 // a stop the launcher did not forward (stopped_with_the_job)
  std::string stop_message;
  std::chrono::steady_clock::time_point term_sent{};
  bool killed = false;
  bool grace_expired = false;  // killed because a worker outlasted the grace after a forwarded signal
  std::string stall, verdict;  // Note [Stall seen by the launcher]
};

// The workers as their process groups see them.
std::vector<WorkerGroup> groups_of(const std::vector<Worker>& workers) {
  std::vector<WorkerGroup> groups;
  for (const auto& w : workers) groups.push_back({w.rank, w.pid, w.exited});
  return groups;
}

void signal_all(const std::vector<Worker>& workers, int sig, bool in_teardown = true) {
  signal_groups(groups_of(workers), sig, in_teardown);
}

// Whether a worker's end is a failure of its own: not a clean exit, nor what the launcher asked
// for (a forwarded signal's stop: exit 128+signal or the signal itself; the teardown's SIGTERM
// or SIGKILL). A failure while stopping on a forwarded signal (its save failed) still counts.
bool failed(int st, const Teardown& t) {
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return false;
  if (t.forwarded != 0 && ((WIFEXITED(st) && WEXITSTATUS(st) == 128 + t.forwarded) ||
                           (WIFSIGNALED(st) && WTERMSIG(st) == t.forwarded)))
    return false;
  // SIGKILL is the launcher's after a worker's failure or a second signal; after a forwarded
  // signal's grace ran out it is a failure: the worker did not finish its save.
  const bool term_sent = t.term_sent != std::chrono::steady_clock::time_point{};
  if (term_sent && WIFSIGNALED(st) &&
      (WTERMSIG(st) == SIGTERM || (t.killed && WTERMSIG(st) == SIGKILL && !t.grace_expired)))
    return false;
  if (term_sent && t.forwarded == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGTERM)
    return false;  // the teardown's SIGTERM, handled as a stop (ddptrain's workers exit 143)
  return true;
}

// Whether a worker that exited 128 + a signal the launcher did not forward stopped with the job:
// its error file says it stopped on that signal (Note [Agreed stop]: one that another node
// received, or one sent to this worker alone). The others stop after the same step by the vote;
// they get the signal's grace, as after a forwarded one, and no restart follows.
bool stopped_with_the_job(const Worker& w, Teardown& t, const std::string& error_dir, OutputSink& err) {
  if (!WIFEXITED(w.status) || WEXITSTATUS(w.status) <= 128) return false;
  const int sig = WEXITSTATUS(w.status) - 128;
  const ErrorRecord e = read_error_file(error_file_of(error_dir, w.rank));
  if (e.stop_signal != sig) return false;
  if (t.stopped == 0 && t.first_failed < 0 && t.forwarded == 0) {
    t.stopped = sig;
    t.stop_message = e.message;
    t.term_sent = std::chrono::steady_clock::now();
    say(err, "launch: rank %d stopped with the job on %s, which this launcher did not receive (%s)\n", w.rank,
        strsignal(sig), e.message.c_str());
  }
  return true;
}

// Reaps exited workers; the first failure stops the others (SIGTERM). An exited worker's
// progress is no longer watched for a stall.
void reap(std::vector<Worker>& workers, Teardown& t, StallWatch& watch, const std::string& error_dir,
          OutputSink& err) {
  for (auto& w : workers) {
    if (w.exited) continue;
    int st = 0;
    if (::waitpid(w.pid, &st, WNOHANG) != w.pid) continue;
    w.exited = true;
    w.status = st;
    watch.worker_exited(w.rank);
    if (!failed(st, t) || stopped_with_the_job(w, t, error_dir, err)) continue;
    t.failure_order.push_back(w.rank);
    if (t.first_failed >= 0) continue;
    t.first_failed = w.rank;
    if (t.forwarded != 0 || t.stopped != 0) {  // the others are stopping already, on the signal
      say(err, "launch: rank %d (pid %d) %s while stopping on %s\n", w.rank, w.pid, describe_exit(st).c_str(),
          strsignal(t.forwarded != 0 ? t.forwarded : t.stopped));
      continue;
    }
    signal_all(workers, SIGTERM);  // first: the message may wait on a blocked stderr
    t.term_sent = std::chrono::steady_clock::now();
    say(err, "launch: rank %d (pid %d) %s; stopping the other workers\n", w.rank, w.pid,
        describe_exit(st).c_str());
  }
}

// A received signal goes to the workers once (all but SIGINT as SIGTERM): they finish their step and
// save, within signal_grace_s; a second signal sends SIGKILL at once. After a worker's failure the others get
// kill_grace_s between SIGTERM and SIGKILL.
void forward_signal(std::vector<Worker>& workers, Teardown& t, const LaunchOptions& o, int sig,
                    OutputSink& err) {
  if (t.forwarded == 0 && t.first_failed >= 0) {
    // The group is being stopped already (a worker failed, a stall): nothing is left to save, and
    // the signal's longer grace would only keep hung workers alive. No restart follows.
    t.interrupted = sig;
    if (t.killed) return;
    say(err, "launch: got %s while stopping the workers; sending SIGKILL\n", strsignal(sig));
    signal_all(workers, SIGKILL);
    t.killed = true;
    return;
  }
  if (t.forwarded != 0) {
    // A second signal, not the same one delivered twice (a hang-up reaches the launcher from its
    // shell and from the kernel), which would kill the save the first one asked for.
    if (t.killed || std::chrono::steady_clock::now() - t.term_sent < std::chrono::seconds(1)) return;
    say(err, "launch: got %s again; sending SIGKILL to the workers\n", strsignal(sig));
    signal_all(workers, SIGKILL);
    t.killed = true;
    return;
  }
  // A hang-up, a quit or SIGUSR1/2 stops the workers as SIGTERM does: they save
  // (--checkpoint_on_signal), where SIGHUP's default would end them at once.
  const int forward = sig == SIGINT ? SIGINT : SIGTERM;
  say(err, "launch: got %s, forwarding %s to the workers (SIGKILL after %d s, or at a second signal)\n",
      strsignal(sig), forward == SIGINT ? "SIGINT" : "SIGTERM", o.signal_grace_s);
  t.forwarded = forward;
  signal_all(workers, forward);
  t.term_sent = std::chrono::steady_clock::now();
}

void forward_and_escalate(std::vector<Worker>& workers, Teardown& t, const LaunchOptions& o,
                          OutputSink& err) {
  if (const int sig = g_signal.exchange(0); sig != 0) forward_signal(workers, t, o, sig, err);
  const bool stopping = t.forwarded != 0 || t.stopped != 0;  // on a signal: the workers save
  const int grace = stopping ? o.signal_grace_s : o.kill_grace_s;
  if (t.term_sent != std::chrono::steady_clock::time_point{} && !t.killed &&
      std::chrono::steady_clock::now() - t.term_sent > std::chrono::seconds(grace)) {
    for (auto& w : workers)
      if (!w.exited)
        say(err, "launch: rank %d (pid %d) did not stop within %d s of %s; sending SIGKILL\n", w.rank, w.pid,
            grace,
            t.forwarded != 0 ? "the forwarded signal (--signal_grace_s)"
            : t.stopped != 0 ? "the job's stop (--signal_grace_s)"
                             : "SIGTERM (hung?)");
    // A clean end's leftovers (a child holding a pipe) are left alone, as torchrun leaves them.
    signal_all(workers, SIGKILL, /*in_teardown=*/t.first_failed >= 0 || stopping);
    t.grace_expired = stopping;
    t.killed = true;
  }
}

// Note [Stall seen by the launcher]: once the verdict is in, the group stops as failed.
void stop_if_stalled(std::vector<Worker>& workers, Teardown& t, StallWatch& watch, OutputSink& err) {
  auto verdict = watch.poll();
  if (!verdict) return;
  say(err, "launch: flight recorder verdict:\n");
  for (size_t a = 0, b; a < verdict->size(); a = b + 1) {
    b = verdict->find('\n', a);
    if (b == std::string::npos) b = verdict->size();
    say(err, "launch:   %s\n", verdict->substr(a, b - a).c_str());
  }
  t.stall = watch.stall();
  t.verdict = *verdict;
  t.first_failed = workers.front().rank;
  say(err, "launch: stopping the workers after the stall\n");
  signal_all(workers, SIGTERM);
  t.term_sent = std::chrono::steady_clock::now();
}

// The root cause: the first failure (in the order reaped) that is not merely a broken
// collective caused by another rank's death, nor a worker that had stopped (its stop record:
// it failed after, e.g. killed in its shutdown); else the first failure.
GroupResult root_cause(const std::vector<Worker>& workers, const Teardown& t, const std::string& error_dir) {
  GroupResult r;
  r.forwarded = t.forwarded;
  r.interrupted = t.interrupted;
  r.stopped = t.stopped;
  if (t.first_failed < 0) {
    r.message = t.stop_message;
    return r;
  }
  if (!t.stall.empty()) {
    r.first_failed = t.first_failed;
    r.stall = t.stall;
    r.message = t.verdict;
    return r;
  }
  const Worker* root = nullptr;
  ErrorRecord root_err;
  for (int pass = 0; pass < 2 && root == nullptr; ++pass) {
    for (int rank : t.failure_order) {
      const Worker& w =
          *std::find_if(workers.begin(), workers.end(), [&](const Worker& x) { return x.rank == rank; });
      ErrorRecord e = read_error_file(error_file_of(error_dir, rank));
      if (pass == 0 && (e.secondary || e.stop_signal != 0)) continue;  // a stop record: it stopped first
      root = &w;
      root_err = e;
      break;
    }
  }
  r.first_failed = root->rank;
  r.failed_pid = root->pid;
  r.status = root->status;
  r.message = root_err.message;
  return r;
}

// Runs one attempt of the local worker group to its end.
GroupResult run_group(const LaunchOptions& o, const std::string& self_exe,
                      const std::vector<std::string>& worker_args, int restart_count,
                      const std::string& error_dir, Outputs& io) {
  OutputSink& err = io.err;
  std::vector<int> local_ranks;
  for (int lr = 0; lr < o.nproc_per_node; ++lr) local_ranks.push_back(o.node_rank * o.nproc_per_node + lr);
  StallWatch watch(error_dir, o.stall_s, local_ranks, o.nproc_per_node * o.nnodes, err);
  watch.reset();
  std::vector<Worker> workers = spawn_workers(o, self_exe, worker_args, restart_count, error_dir, io);
  Teardown t;
  for (;;) {
    pump_output(workers);
    reap(workers, t, watch, error_dir, err);
    if (t.first_failed < 0 && t.forwarded == 0 && t.stopped == 0) stop_if_stalled(workers, t, watch, err);
    forward_and_escalate(workers, t, o, err);
    bool all_exited = true, all_closed = true;
    for (auto& w : workers) {
      all_exited &= w.exited;
      all_closed &= w.out_fd < 0 && w.err_fd < 0;
    }
    // Output pipes may be held open by a worker's own children: do not wait on them forever.
    if (all_exited && (all_closed || t.killed)) break;
    if (all_exited && t.term_sent == std::chrono::steady_clock::time_point{})
      t.term_sent = std::chrono::steady_clock::now();
  }
  const bool stopping = t.forwarded != 0 || t.stopped != 0;
  if (t.first_failed >= 0 || stopping)
    end_groups(groups_of(workers),
               t.killed ? std::chrono::steady_clock::now()
                        : t.term_sent + std::chrono::seconds(stopping ? o.signal_grace_s : o.kill_grace_s),
               g_signal, err);
  for (auto& w : workers) {
    w.out->flush();
    w.err->flush();
    if (w.out_fd >= 0) ::close(w.out_fd);
    if (w.err_fd >= 0) ::close(w.err_fd);
  }
  return root_cause(workers, t, error_dir);
}

}  // namespace

int run_launcher(const LaunchOptions& o, const std::string& self_exe,
                 const std::vector<std::string>& worker_args) {
  // Our own commands run as this binary; anything else is a program of its own.
  const bool ours = is_ddptrain_command(worker_args.at(0));
  const std::string exe = ours ? self_exe : find_program(worker_args[0]);
  const std::vector<std::string> exe_args =
      ours ? worker_args : std::vector<std::string>(worker_args.begin() + 1, worker_args.end());
  // Inherited SIGCHLD ignored, the kernel would reap the workers itself: waitpid would never see
  // one end (ECHILD), and the launcher would wait for ever.
  ::signal(SIGCHLD, SIG_DFL);
  // Its signals blocked by whatever started it, the launcher would never see one, nor its
  // workers (they inherit the mask).
  const sigset_t handled = launcher_signal_set();
  ::pthread_sigmask(SIG_UNBLOCK, &handled, nullptr);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  // A hang-up (ssh gone), a quit, a scheduler's warning before its time limit (Slurm's --signal)
  // stop as SIGTERM does, unless ignored (nohup): then the run goes on, as before.
  for (const int sig : {SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler != SIG_IGN) ::sigaction(sig, &sa, nullptr);
  }
  // Output closed (`ddptrain launch ... | tee log` after a Ctrl-C ended tee): a write fails with
  // EPIPE and the output sink drops the rest. SIGPIPE's default would end the launcher, and with it
  // (PR_SET_PDEATHSIG) every worker in the middle of its save on the signal.
  ::signal(SIGPIPE, SIG_IGN);
  Outputs io;
  OutputSink& err = io.err;
  const std::string error_dir = make_launch_dir(err);
  GroupResult r;
  const std::string& first_resume = o.first_resume_from;
  int restarts = 0;  // made: the report's (a usage error or a stop ends before max_restarts)
  for (int attempt = 0;; ++attempt) {
    restarts = attempt;
    // A restarted group resumes from the newest complete checkpoint (the last flag wins), or,
    // where none was saved yet, from the checkpoint the first attempt resumed.
    std::vector<std::string> args = exe_args;
    if (attempt > 0 && worker_args[0] == "train" && o.worker_saves) {
      args.insert(args.end(), {"--resume_from", "auto"});
      if (!first_resume.empty() && first_resume != "auto")
        args.insert(args.end(), {"--resume_fallback", first_resume});
    }
    try {
      r = run_group(o, exe, args, attempt, error_dir, io);
    } catch (...) {  // a fork that failed: the workers started die with this launcher (PDEATHSIG)
      std::error_code ec;
      std::filesystem::remove_all(error_dir, ec);
      drain_for_a_few_seconds(io);  // the lines and messages before it go out first
      throw;
    }
    if (r.first_failed < 0 || r.forwarded != 0 || r.stopped != 0 || attempt >= o.max_restarts) break;
    if (r.interrupted != 0) {  // a signal while the failed attempt was being stopped
      say(err, "launch: not restarting: got %s\n", strsignal(r.interrupted));
      break;
    }
    if (const int sig = g_signal.load(); sig != 0) {  // came as the group ended: no new group
      say(err, "launch: not restarting: got %s\n", strsignal(sig));
      break;
    }
    if (r.stall.empty() && WIFEXITED(r.status) && WEXITSTATUS(r.status) == 2) {
      // A usage error repeats on every attempt, and a restart resumes `auto`: after an explicit
      // --resume_from that was refused, that would be the branch the user chose to leave.
      say(err, "launch: not restarting after rank %d's usage error (exit 2): it would repeat\n",
          r.first_failed);
      break;
    }
    say(err, "launch: restarting the workers (restart %d of %d) after %s\n", attempt + 1, o.max_restarts,
        r.stall.empty() ? ("rank " + std::to_string(r.first_failed) + " " + describe_exit(r.status)).c_str()
                        : ("a stall: " + r.stall).c_str());
  }
  std::error_code ec;
  std::filesystem::remove_all(error_dir, ec);
  const int world = o.nproc_per_node * o.nnodes;
  int code = 0;
  if (!r.stall.empty()) {
    say(err, "launch: FAILED: the job stalled (%s; %d workers%s)\nlaunch: root cause: %s", r.stall.c_str(),
        world,
        restarts > 0 ? detail::concat(", after ", restarts, restarts == 1 ? " restart" : " restarts").c_str()
                     : "",
        r.message.c_str());
    code = 1;
  } else if (r.first_failed >= 0) {
    say(err, "launch: FAILED: rank %d (pid %d) %s (first failure of %d workers%s)%s%s\n", r.first_failed,
        r.failed_pid, describe_exit(r.status).c_str(), world,
        restarts > 0 ? detail::concat(", after ", restarts, restarts == 1 ? " restart" : " restarts").c_str()
                     : "",
        r.message.empty() ? "" : "\nlaunch: root cause: ", r.message.c_str());
    code = exit_code_of(r.status);
    if (code == 0) code = 1;
  } else if (r.forwarded) {
    code = 128 + r.forwarded;
  } else if (r.stopped) {
    say(err, "launch: stopped with the job on %s: %s\n", strsignal(r.stopped), r.message.c_str());
    code = 128 + r.stopped;
  }
  drain_for_a_few_seconds(io);
  return code;
}

}  // namespace ddptrain
