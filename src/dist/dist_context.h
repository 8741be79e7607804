// DistContext: who this process is in the job (rank, world size, local rank, device) and the
// process group it talks through. Built once in main() from the torchrun environment
// contract and passed by const reference; there is no global distributed state.
// Invariant: every rank calls the collectives below in the same order (see DESIGN.md, 1).
// World size 1 creates no store and no process group; the collectives are then identities.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "dist/env_contract.h"
#include "dist/flight_recorder.h"
#include "obs/logger.h"
#include "util/torch_compat.h"

namespace ddptrain {

class BoundedStore;
class FlightWatchdog;
class PeerFailureWatch;

struct DistOptionsResolved {
  std::string backend = "auto";  // auto | gloo | nccl
  std::chrono::seconds timeout{600};
  /// Tests and debugging: the backend takes tensors on this device only (Note [Strict
  /// collective device]); every collective is staged there, the asynchronous ones synchronously.
  std::optional<at::Device> strict_device = std::nullopt;
  /// Collectives each rank remembers (Note [Flight recorder]); 0: none.
  size_t flight_recorder = 64;
  /// What this rank does once another rank announced its failure (Note [A rank's failure ends
  /// the job]), called from a watch thread after peer_failure_grace unless the context is gone
  /// by then; the CLI reports it and ends the process. Unset: no watch (the rank learns it at
  /// its next collective, on NCCL only at the timeout).
  std::function<void(const std::string& announcement)> on_peer_failure = nullptr;
  std::chrono::milliseconds peer_failure_grace{5000};
  /// How long the ranks wait for each other to join, in all (Note [Rendezvous deadline]); 0:
  /// `timeout`.
  std::chrono::seconds rendezvous_timeout{0};
};

class DistContext {
 public:
  /// Rendezvous (TCPStore) and process-group creation; blocks until all ranks joined or the
  /// rendezvous timeout passes.
  DistContext(const EnvContract& env, const DistOptionsResolved& opts);
  ~DistContext();
  DistContext(const DistContext&) = delete;
  DistContext& operator=(const DistContext&) = delete;

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  int local_rank() const { return env_.local_rank; }
  int local_world_size() const { return env_.local_world_size; }
  bool is_main() const { return env_.rank == 0; }
  /// TORCHELASTIC_RESTART_COUNT: how many times the launcher restarted this group (0: first attempt).
  int restart_count() const { return env_.restart_count; }
  /// The launcher's time between a stop signal and SIGKILL, in seconds (0: unknown).
  int stop_grace_s() const { return env_.stop_grace_s; }
  /// TORCHELASTIC_RUN_ID: the torchrun job's rendezvous id ("" where none; Note [A torchrun job's restarts]).
  const std::string& job_id() const { return env_.job_id; }
  const at::Device& device() const { return device_; }
  const std::string& backend_name() const { return backend_name_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  const Logger& log() const { return log_; }
  /// Whether there is a process group (world > 1, or a backend named at world 1, then with an
  /// in-process store); without one every collective is a no-op.
  bool communicates() const { return static_cast<bool>(pg_); }
  /// Whether all_reduce accepts tensors of this dtype on this backend.
  bool reduces(at::ScalarType dtype) const;

  /// Sums the tensors in place across ranks (synchronous, with the timeout). Tensors on a
  /// device the backend does not take are staged (Note [Collectives on the backend's device]).
  void all_reduce_sum(std::vector<at::Tensor>& tensors, const char* what = "all_reduce") const;
  /// Starts an asynchronous sum; the caller waits on the Work before touching the tensors.
  /// The tensors must already be where the backend takes them (an InternalError otherwise:
  /// a copy back after an asynchronous wait would be the caller's to forget). Under a strict
  /// device they are staged and reduced at once (Note [Strict collective device]).
  compat::WorkHandle all_reduce_sum_async(std::vector<at::Tensor>& tensors,
                                          const std::string& what = "all_reduce") const;
  /// Whether reduce_scatter_sum_async works on this backend (Gloo of LibTorch 1.13 has none).
  bool reduce_scatters() const;
  /// Starts an asynchronous sum of every rank's `input` (world_size() equal chunks) whose
  /// chunk r lands in rank r's `output`. Both on the backend's device, as for
  /// all_reduce_sum_async; the caller waits on the Work before touching either.
  compat::WorkHandle reduce_scatter_sum_async(const at::Tensor& input, at::Tensor& output,
                                              const std::string& what = "reduce_scatter") const;
  /// Copies root's tensors into every rank's tensors (synchronous; staged as all_reduce_sum).
  void broadcast(std::vector<at::Tensor>& tensors, int root, const char* what = "broadcast") const;
  /// Every rank's `mine` (same shape and dtype on every rank) into per_rank[r] (synchronous;
  /// staged as all_reduce_sum). per_rank holds world_size() tensors shaped like `mine`. Without
  /// a process group per_rank[0] is a copy of mine.
  void all_gather(const at::Tensor& mine, std::vector<at::Tensor>& per_rank,
                  const char* what = "all_gather") const;
  /// all_gather started asynchronously (a process group needed); the tensors must be on the
  /// backend's device, as for all_reduce_sum_async, and the caller waits on the Work before
  /// touching them. Under a strict device it is staged and done at once.
  compat::WorkHandle all_gather_async(const at::Tensor& mine, std::vector<at::Tensor>& per_rank,
                                      const std::string& what = "all_gather") const;
  /// Blocks until every rank arrived.
  void barrier(const char* what = "barrier") const;
  /// Rank 0 says `what` is done; the others wait for it through the rendezvous store (on the
  /// host, whatever the backend: NCCL's barrier takes no timeout of its own), up to `at_least`
  /// where that is longer than the context's timeout. The end of a checkpoint save, where the
  /// others wait while rank 0 writes: a write longer than a --dist_timeout_s set short to catch
  /// hangs failed the run and lost the save. Every rank calls it as a collective (the events
  /// are numbered). The others poll the store, so the failure watch is not held behind a
  /// blocking wait, and a failure announced meanwhile is a CollectiveError naming it.
  void wait_for_main(const std::string& what, std::chrono::milliseconds at_least) const;
  /// Waits on a Work: Gloo, the host until it completes, with the context's timeout; NCCL, the
  /// current CUDA stream only (Note [Waiting on NCCL]). Error naming this rank on failure.
  void wait(const compat::WorkHandle& work, const char* what) const;

  /// This rank's last collectives (Note [Flight recorder]); the step loop sets its phase there.
  FlightRecorder& recorder() const { return *recorder_; }
  /// Where flight records go when a collective fails; starts the watchdog that writes this
  /// rank's when another rank's fails (with a process group and the recorder on), once an
  /// earlier start's records there are set aside (Note [An earlier start's flight records]). A
  /// collective: every rank calls it, with the same folder (or its own node's copy).
  void set_flight_dir(const std::string& dir);
  /// Writes this rank's flight record and asks the others for theirs (e.g. from the program's
  /// std::terminate handler when a backend thread threw); nothing without a flight folder.
  void dump_flight(const std::string& reason) const;

  /// This rank ends with an error: tells the others through the store (Note [A rank's failure
  /// ends the job]); the job's first announcement stays, except that a primary one replaces a
  /// secondary one (a collective broken by another's failure). Rank 0 serving the store waits
  /// (at most 2 s) until the others have read it. Never throws; nothing at world 1.
  void announce_failure(const std::string& reason, bool secondary = false) const;

  /// How many collectives so far had a tensor staged to the backend's device.
  int64_t staged_collectives() const { return staged_; }

  /// The normal end of a run: shuts the backend down gracefully (NCCL finalizes its
  /// communicators) and destroys the process group. The destructor only releases it: after an
  /// error a peer may be gone, and a graceful shutdown could wait for it.
  void shutdown();

 private:
  void release();
  void set_aside_earlier_flight_records(const std::string& dir) const;
  // The process group as this context uses it: wrapped in a DeviceCheckingBackend under a
  // strict device (Note [Strict collective device]).
  compat::CommHandle checked(compat::CommHandle pg) const;
  // Where a collective's tensor must be staged, or nullopt when the backend takes it as it is.
  std::optional<at::Device> stage_for(const at::Tensor& t) const;

  EnvContract env_;
  at::Device device_{at::kCPU};
  std::string backend_name_ = "none";
  std::chrono::milliseconds timeout_;
  Logger log_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::shared_ptr<const BoundedStore>
      bounded_;  // store_'s, after the rendezvous (Note [Bounded store requests])
  compat::CommHandle pg_;
  std::optional<at::Device> strict_device_;
  mutable int64_t staged_ = 0;
  mutable int64_t main_events_ = 0;  // wait_for_main's calls: every rank numbers them alike

  /// Runs op on tensors the backend takes: the given ones, or staged copies written back after
  /// its (waited) Work, which it returns.
  compat::WorkHandle run_staged(const char* op_name, std::vector<at::Tensor>& tensors,
                                const std::string& what,
                                const std::function<compat::WorkHandle(std::vector<at::Tensor>&)>& op) const;
  /// An asynchronous collective: op on tensors the backend must take as they are (an
  /// InternalError otherwise), recorded; under a strict device staged and done at once.
  compat::WorkHandle run_async(const char* op_name, std::vector<at::Tensor>& tensors, const std::string& what,
                               const std::function<compat::WorkHandle(std::vector<at::Tensor>&)>& op) const;
  // The flight recorder's record of an asynchronous collective started by start().
  compat::WorkHandle recorded(const char* op_name, const std::string& what,
                              const std::vector<at::Tensor>& tensors,
                              const std::function<compat::WorkHandle()>& start) const;

  std::unique_ptr<FlightRecorder> recorder_;
  std::unique_ptr<FlightWatchdog> watchdog_;
  std::unique_ptr<PeerFailureWatch> peer_watch_;
};

}  // namespace ddptrain
