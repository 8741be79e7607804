// Note [Stall seen by the launcher]
// A hang shows first as a collective that does not complete: the ranks that reached it wait,
// the rank behind does something else (or nothing: stopped, in a deadlock). The collective
// timeout (--dist_timeout_s, 600 s by default, as torch's) is the last line of defence; with
// `ddptrain launch --stall_s S` the launcher acts after S seconds instead, as Horovod's stall
// inspector does. Each worker's flight watchdog (dist/flight_watchdog.h) writes its progress
// to the launch folder (DDPTRAIN_LAUNCH_DIR, set by the launcher) when it changes: its phase,
// step, last completed collective and the one its main thread blocks on with the time it began
// to (not merely the oldest one issued: the stop vote is waited for a step after it is issued).
// When a local rank has waited S seconds in one collective, the launcher writes a request file
// there; every local watchdog answers with its flight record and raises the flag in the job's
// store, so the ranks of the other nodes write theirs too. The launcher prints the verdict
// (dist/flight_verdict.h) from the records in the flight folder once every rank's is in (or
// after a few seconds), and stops the group as failed, so --max_restarts restarts it from the
// newest checkpoint. A wait is timed by the launcher's own steady clock from when it first saw
// it (the ranks' `since` is wall-clock time: a clock step would make every wait look old), and
// a worker that exited is no longer watched (its last progress may show a wait it finished).
// S must be longer than any stretch in which one rank legitimately makes
// the others wait (start-up data loading, evaluation, writing a checkpoint): off by default.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ddptrain {

class OutputSink;

class StallWatch {
 public:
  /// local_ranks: the ranks this launcher started; world: the job's size; err: where it says
  /// what it sees (the launcher's stderr).
  StallWatch(std::string launch_dir, double stall_s, std::vector<int> local_ranks, int world,
             OutputSink& err);

  /// Forgets the previous attempt's files (before a group starts).
  void reset();
  /// Call often. Reads the progress files at most once a second; on a stall, says so on stderr
  /// and asks every rank for its flight record; returns the verdict once the records are in
  /// (or 5 s later): then the group is to be stopped.
  std::optional<std::string> poll();
  /// The worker of this rank has exited: its progress file is no longer read (and is removed).
  void worker_exited(int rank);
  bool stalled() const { return !stall_.empty(); }
  /// What was seen: "rank 0 has waited 20 s in collective #812 (all_reduce, gradient bucket 0, step 204)".
  const std::string& stall() const { return stall_; }

 private:
  std::optional<std::string> find_stall();
  // A rank's wait: the collective's number and when this launcher first saw it.
  struct SeenWait {
    int64_t seq = -1;
    std::chrono::steady_clock::time_point first_seen{};
  };

  std::string launch_dir_;
  double stall_s_;
  std::vector<int> local_ranks_;
  int world_;
  OutputSink& err_;
  std::set<int> exited_;
  std::map<int, SeenWait> waits_;
  std::string stall_, flight_dir_;
  bool answered_ = false;
  std::chrono::steady_clock::time_point last_read_{}, asked_{};
};

}  // namespace ddptrain
