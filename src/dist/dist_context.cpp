#include "dist/dist_context.h"

#include <algorithm>
#include <thread>

#include <torch/cuda.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "dist/attempt_name.h"
#include "dist/backend_factory.h"
#include "dist/bounded_store.h"
#include "dist/device_checking_backend.h"
#include "dist/flight_verdict.h"
#include "dist/flight_watchdog.h"
#include "dist/peer_failure.h"
#include "dist/rendezvous_barrier.h"
#include "util/clock.h"
#include "util/error.h"

#ifdef USE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace ddptrain {
namespace {

// How long torchrun's agent store may take to answer the first requests (Note [An agent store
// of another torch]).
constexpr std::chrono::milliseconds kAgentStoreAnswer{10000};

// Makes d this process's current CUDA device. Everything that names no device (the caching
// allocator, default streams, NCCL's communicators, CUDA generators looked up by type) then
// works on cuda:<local_rank> instead of every rank crowding onto cuda:0.
void make_current(const at::Device& d) {
#ifdef USE_CUDA
  if (d.is_cuda()) c10::cuda::set_device(d.index());
#endif
}

// Starts the sum of tensors (already where the backend takes them) across ranks.
compat::WorkHandle start_sum(compat::CommBackend& pg, std::vector<at::Tensor>& tensors,
                             std::chrono::milliseconds timeout) {
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  o.timeout = timeout;
  return pg.allreduce(tensors, o);
}

}  // namespace

DistContext::DistContext(const EnvContract& env, const DistOptionsResolved& opts)
    : env_(env),
      timeout_(opts.timeout),
      log_(env.rank, env.world_size),
      strict_device_(opts.strict_device),
      recorder_(std::make_unique<FlightRecorder>(opts.flight_recorder)) {
  if (torch::cuda::is_available()) {
    device_ =
        at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(env_.local_rank % torch::cuda::device_count()));
    make_current(device_);
  }
  backend_name_ = resolve_backend(opts.backend, device_);
  // One process: no process group, unless a backend was named (--backend nccl|gloo), so a
  // world of one still runs DDP's real collectives, as PyTorch's DDP does under torchrun.
  if (env_.world_size == 1 && opts.backend == "auto") {
    backend_name_ = "none";
    return;
  }
  // A world of one needs no rendezvous: an in-process store, so no port can collide.
  if (env_.world_size == 1 && !env_.use_agent_store) {
    store_ = c10::make_intrusive<c10d::HashStore>();
    bounded_ = std::make_shared<const BoundedStore>(store_);
    pg_ = checked(
        make_backend(backend_name_, store_, env_.rank, env_.world_size, env_.master_addr, timeout_, device_));
    return;
  }
  // Note [Rendezvous deadline]: the joining has its own, in all.
  const std::chrono::milliseconds joining =
      opts.rendezvous_timeout.count() > 0 ? std::chrono::milliseconds(opts.rendezvous_timeout) : timeout_;
  const Clock::time_point joined_by = Clock::now() + joining;
  // Until every rank has joined nothing else is printed: say what this node waits for.
  if (env_.local_rank == 0)
    log_.info_all_ranks(str("rendezvous at ", env_.master_addr, ":", env_.master_port,
                            ": waiting for the job's ", env_.world_size, " ranks (at most ",
                            joining.count() / 1000, " s)"));
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(env_.master_port);
  // Under torchrun's static rendezvous its agent already serves the store; else rank 0 does.
  so.isServer = env_.rank == 0 && !env_.use_agent_store;
  so.waitWorkers = false;
  // Note [An agent store of another torch]: torchrun's agent serves its store before it starts
  // the workers, so it answers at once, unless it speaks another TCPStore protocol (torch 2.x's
  // agent and this LibTorch 1.13, or the reverse): then a request can wait for the whole
  // --dist_timeout_s. So the first requests get a short timeout, and the full one after.
  so.timeout = env_.use_agent_store ? std::min(joining, kAgentStoreAnswer) : joining;
  bool answered = !env_.use_agent_store;
  try {
    // Only a worker's store can come late: torchrun's agent serves its store before it starts
    // the workers, and the client of its own below comes once every rank has joined.
    if (!so.isServer && !env_.use_agent_store) wait_until_served(env_.master_addr, so.port, joined_by);
    auto tcp = connect_store(env_.master_addr, so, joined_by);
    if (env_.use_agent_store) {
      const std::string key = "ddptrain/probe/" + std::to_string(env_.rank);
      tcp->set(key, std::vector<uint8_t>{1});
      tcp->get(key);
      tcp->setTimeout(joining);
      answered = true;
    }
    // Every attempt of a job meets on the agent's store: its keys go under a name the ranks agree
    // on (Note [An agent store outlives its attempts]). A store of the workers' (rank 0's) is new
    // in every attempt.
    const std::string prefix =
        "ddptrain/" +
        (env_.use_agent_store ? agree_on_attempt_name(*tcp, env_.rank, env_.world_size, joined_by) : "0");
    store_ = c10::make_intrusive<c10d::PrefixStore>(prefix, tcp);
    wait_for_every_rank(*store_, env_.rank, env_.world_size, joined_by,
                        timeout_);  // then: the collective timeout
    // Note [Bounded store requests]: a client of its own, which no request of the process
    // group's holds (NCCL's get of its communicator's id waits there until rank 0 comes).
    c10d::TCPStoreOptions own = so;
    own.isServer = false;
    own.timeout = timeout_;
    bounded_ = std::make_shared<const BoundedStore>(c10::make_intrusive<c10d::PrefixStore>(
        prefix,
        connect_store(env_.master_addr, own, std::max(joined_by, Clock::now() + std::chrono::seconds(30)))));
    pg_ = checked(
        make_backend(backend_name_, store_, env_.rank, env_.world_size, env_.master_addr, timeout_, device_));
    if (opts.on_peer_failure)  // Note [A rank's failure ends the job]
      peer_watch_ = std::make_unique<PeerFailureWatch>(bounded_, env_.rank, log_, opts.peer_failure_grace,
                                                       opts.on_peer_failure);
  } catch (const RendezvousIncomplete& e) {  // this rank reached the store; others did not
    throw Error(str("[rank ", env_.rank, "/", env_.world_size, "] rendezvous at ", env_.master_addr, ":",
                    env_.master_port, " failed: ", e.what(), " within ", joining.count() / 1000,
                    " s (--rendezvous_timeout_s, or --dist_timeout_s where none is given)",
                    so.isServer ? "; this rank serves the rendezvous and the others did not all arrive" : "",
                    ": are the job's ", env_.world_size,
                    " ranks started, with this MASTER_ADDR/MASTER_PORT and WORLD_SIZE?"));
  } catch (const std::exception& e) {
    const auto* c10e = dynamic_cast<const c10::Error*>(&e);
    const std::string msg = c10e ? c10e->what_without_backtrace() : e.what();
    const std::string where = str("[rank ", env_.rank, "/", env_.world_size, "] ");
    // The environment's errors (util/error.h: exit 2), which a restart would repeat.
    if (so.isServer && (msg.find("Address already in use") != std::string::npos ||
                        msg.find("EADDRINUSE") != std::string::npos))
      throw UsageError(
          str(where, "MASTER_PORT ", env_.master_port,
              " is already in use on this host (another job or "
              "program listens there), so rank 0 cannot serve the rendezvous store; pick a free port "
              "in MASTER_PORT (ddptrain launch --master_port)"));
    if (!answered)
      throw UsageError(str(where, "torchrun's store at ", env_.master_addr, ":", env_.master_port,
                           " failed its first requests (", msg, "; they wait at most ",
                           so.timeout.count() / 1000, " s). This build is LibTorch ", TORCH_VERSION_MAJOR,
                           ".", TORCH_VERSION_MINOR,
                           ": a torchrun of another torch (e.g. pip's torch 2.x with the LibTorch 1.13 "
                           "build) serves a store it cannot talk to. Run it under the torchrun of torch ",
                           TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR,
                           ", or with `ddptrain launch`, or use the build of that torch"));
    // Rank 0 serves the store: what it waited for is the other ranks.
    throw Error(str(where, "rendezvous at ", env_.master_addr, ":", env_.master_port, " failed: ", msg,
                    so.isServer
                        ? str(" (this rank serves the rendezvous and the others did not all arrive: are the "
                              "job's ",
                              env_.world_size,
                              " ranks started, with this MASTER_ADDR/MASTER_PORT and "
                              "WORLD_SIZE?)")
                    : env_.use_agent_store
                        ? std::string(" (torchrun's agent serves this store: is the agent of the job's first "
                                      "node still running?)")
                        : std::string(" (is rank 0 running, MASTER_ADDR/MASTER_PORT right, and the "
                                      "port free?)")));
  }
}

// After an error a peer may be gone: only release (a graceful backend shutdown could wait on it).
DistContext::~DistContext() { release(); }

bool DistContext::reduces(at::ScalarType dtype) const { return backend_reduces(backend_name_, dtype); }

bool DistContext::reduce_scatters() const { return pg_ && backend_reduce_scatters(backend_name_); }

void DistContext::shutdown() {
  // The normal end of a run: NCCL finalizes its communicators (Python's destroy_process_group).
  if (pg_) compat::shutdown_backend(*pg_);
  release();
}

void DistContext::release() {
  peer_watch_.reset();  // they poll the store
  watchdog_.reset();
  // Dropping the last reference joins Gloo's worker threads; store after the group.
  pg_.reset();
  bounded_.reset();
  store_.reset();
}

void DistContext::wait(const compat::WorkHandle& work, const char* what) const {
  // c10::Error's what() carries a C++ backtrace: keep the message only.
  auto fail = [&](const char* msg) {
    recorder_->complete_work(work.get(), false);
    const std::string reason =
        str(what, " failed (", backend_name_, ", timeout ", timeout_.count() / 1000, " s): ", msg);
    if (watchdog_) {  // Note [Flight recorder]
      const std::string verdict = watchdog_->raise(reason);
      log_.warn(str("flight recorder (records in ", watchdog_->dir(), "; `ddptrain inspect hang ",
                    watchdog_->dir(), "`): ", verdict.substr(0, verdict.size() - 1)));
    }
    // Note [A rank's failure ends the job]: the failure another rank announced is the cause.
    const std::optional<AnnouncedFailure> first = bounded_ ? announced_failure(*bounded_) : std::nullopt;
    throw CollectiveError(str("[rank ", env_.rank, "/", env_.world_size, "] ", reason,
                              first ? " — the job failed first on " + first->text
                                    : std::string(" — another rank probably died or is stuck; see its log")));
  };
  try {
    recorder_->wait_begins(work.get());
    if (host_waits(backend_name_))
      work->wait(timeout_);
    else
      work->wait();  // the stream's wait only: no timeout given (Note [Waiting on NCCL])
    recorder_->complete_work(work.get(), true);
  } catch (const c10::Error& e) {
    fail(e.what_without_backtrace());
  } catch (const std::exception& e) {
    fail(e.what());
  }
}

compat::CommHandle DistContext::checked(compat::CommHandle pg) const {
  if (!strict_device_) return pg;
  return c10::make_intrusive<DeviceCheckingBackend>(std::move(pg), *strict_device_, timeout_);
}

std::optional<at::Device> DistContext::stage_for(const at::Tensor& t) const {
  if (strict_device_) return t.device() == *strict_device_ ? std::nullopt : strict_device_;
  return staging_device(backend_name_, device_, t.device());
}

// See Note [Collectives on the backend's device].
compat::WorkHandle DistContext::run_staged(
    const char* op_name, std::vector<at::Tensor>& tensors, const std::string& what,
    const std::function<compat::WorkHandle(std::vector<at::Tensor>&)>& op) const {
  const int64_t seq = recorder_->issue(op_name, what, tensors);
  std::vector<at::Tensor> on_backend = tensors;
  bool staged = false;
  for (auto& t : on_backend)
    if (auto d = stage_for(t)) {
      t = t.to(*d);
      staged = true;
    }
  auto work = op(on_backend);
  recorder_->bind(work.get(), seq);
  wait(work, what.c_str());
  if (!staged) return work;
  ++staged_;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (!on_backend[i].is_same(tensors[i])) tensors[i].copy_(on_backend[i]);
  return work;
}

compat::WorkHandle DistContext::recorded(const char* op_name, const std::string& what,
                                         const std::vector<at::Tensor>& tensors,
                                         const std::function<compat::WorkHandle()>& start) const {
  const int64_t seq = recorder_->issue(op_name, what, tensors);
  compat::WorkHandle work = start();
  recorder_->bind(work.get(), seq);
  return work;
}

void DistContext::all_reduce_sum(std::vector<at::Tensor>& tensors, const char* what) const {
  if (!pg_) return;
  run_staged("all_reduce", tensors, what,
             [&](std::vector<at::Tensor>& ts) { return start_sum(*pg_, ts, timeout_); });
}

compat::WorkHandle DistContext::run_async(
    const char* op_name, std::vector<at::Tensor>& tensors, const std::string& what,
    const std::function<compat::WorkHandle(std::vector<at::Tensor>&)>& op) const {
  // Note [Strict collective device]: staged, and so synchronous, in that mode only.
  if (strict_device_) return run_staged(op_name, tensors, what, op);
  for (const auto& t : tensors)
    DDP_ASSERT(!stage_for(t), "an asynchronous ", op_name, " got a tensor on ", t.device().str(), ", which ",
               backend_name_, " does not take: create it on ", device_.str());
  return recorded(op_name, what, tensors, [&] { return op(tensors); });
}

compat::WorkHandle DistContext::all_reduce_sum_async(std::vector<at::Tensor>& tensors,
                                                     const std::string& what) const {
  DDP_ASSERT(pg_, "all_reduce_sum_async needs a process group (world_size > 1)");
  return run_async("all_reduce", tensors, what,
                   [&](std::vector<at::Tensor>& ts) { return start_sum(*pg_, ts, timeout_); });
}

compat::WorkHandle DistContext::reduce_scatter_sum_async(const at::Tensor& input, at::Tensor& output,
                                                         const std::string& what) const {
  DDP_ASSERT(reduce_scatters(), "reduce_scatter_sum_async on ", backend_name_,
             ", which has no reduce_scatter");
  DDP_ASSERT(input.numel() == output.numel() * world_size(),
             "reduce_scatter: the input is world_size outputs");
  auto op = [&](std::vector<at::Tensor>& ts) {  // ts: the output, then the input's chunks
    std::vector<at::Tensor> out{ts[0]};
    std::vector<std::vector<at::Tensor>> in{std::vector<at::Tensor>(ts.begin() + 1, ts.end())};
    c10d::ReduceScatterOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    o.timeout = timeout_;
    return pg_->reduce_scatter(out, in, o);
  };
  // Chunked where the input lives (a staged copy of each chunk is then a plain tensor).
  std::vector<at::Tensor> ts{output};
  for (const auto& chunk : input.chunk(world_size())) ts.push_back(chunk);
  return run_async("reduce_scatter", ts, what, op);
}

void DistContext::broadcast(std::vector<at::Tensor>& tensors, int root, const char* what) const {
  if (!pg_) return;
  c10d::BroadcastOptions o;
  o.rootRank = root;
  o.timeout = timeout_;
  run_staged("broadcast", tensors, what, [&](std::vector<at::Tensor>& ts) { return pg_->broadcast(ts, o); });
}

namespace {

// ts: this rank's tensor, then one output per rank.
compat::WorkHandle start_all_gather(compat::CommBackend& pg, std::vector<at::Tensor>& ts,
                                    std::chrono::milliseconds timeout) {
  std::vector<at::Tensor> in{ts[0]};
  std::vector<std::vector<at::Tensor>> out{std::vector<at::Tensor>(ts.begin() + 1, ts.end())};
  c10d::AllgatherOptions o;
  o.timeout = timeout;
  return pg.allgather(out, in, o);
}

}  // namespace

void DistContext::all_gather(const at::Tensor& mine, std::vector<at::Tensor>& per_rank,
                             const char* what) const {
  DDP_ASSERT(static_cast<int>(per_rank.size()) == world_size(), "all_gather needs one output per rank");
  if (!pg_) {
    per_rank[0].copy_(mine);
    return;
  }
  // One list, staged together: mine first, then the outputs.
  std::vector<at::Tensor> all{mine};
  all.insert(all.end(), per_rank.begin(), per_rank.end());
  // Staged copies are written back into per_rank.
  run_staged("all_gather", all, what,
             [&](std::vector<at::Tensor>& ts) { return start_all_gather(*pg_, ts, timeout_); });
}

compat::WorkHandle DistContext::all_gather_async(const at::Tensor& mine, std::vector<at::Tensor>& per_rank,
                                                 const std::string& what) const {
  DDP_ASSERT(pg_, "all_gather_async needs a process group (world_size > 1)");
  DDP_ASSERT(static_cast<int>(per_rank.size()) == world_size(), "all_gather needs one output per rank");
  std::vector<at::Tensor> all{mine};
  all.insert(all.end(), per_rank.begin(), per_rank.end());
  return run_async("all_gather", all, what,
                   [&](std::vector<at::Tensor>& ts) { return start_all_gather(*pg_, ts, timeout_); });
}

void DistContext::barrier(const char* what) const {
  if (!pg_) return;
  c10d::BarrierOptions o;
  o.timeout = timeout_;
  wait(recorded("barrier", what, {}, [&] { return pg_->barrier(o); }), what);
}

void DistContext::wait_for_main(const std::string& what, std::chrono::milliseconds at_least) const {
  if (!pg_ || !bounded_) return;
  const std::string key = str("ddptrain/done/", ++main_events_, ": ", what);
  if (is_main()) {
    bounded_->set(key, std::vector<uint8_t>{1});
    return;
  }
  const auto timeout = std::max(timeout_, at_least);
  const auto until = std::chrono::steady_clock::now() + timeout;
  const std::string where = str("[rank ", env_.rank, "/", env_.world_size, "] waiting for rank 0: ", what);
  // Polled, not one blocking wait: a TCPStore client holds its lock for a wait's length, which
  // would hold this rank's failure watch too (Note [A rank's failure ends the job]).
  std::string why = "timed out";
  try {
    for (auto pause = std::chrono::milliseconds(1); std::chrono::steady_clock::now() < until;
         pause = std::min(pause * 2, std::chrono::milliseconds(100))) {
      if (bounded_->check({key})) return;
      if (const auto failure = announced_failure(*bounded_))
        throw CollectiveError(str(where, " — the job failed first on ", failure->text));
      std::this_thread::sleep_for(pause);
    }
  } catch (const CollectiveError&) {
    throw;
  } catch (const std::exception& e) {
    const auto* c10e = dynamic_cast<const c10::Error*>(&e);
    why = c10e ? c10e->what_without_backtrace() : e.what();
  }
  throw CollectiveError(str(where, " failed (store, timeout ", timeout.count() / 1000, " s): ", why,
                            " — rank 0 probably died or is stuck; see its log"));
}

void DistContext::announce_failure(const std::string& reason, bool secondary) const {
  if (!pg_ || !bounded_ || env_.world_size == 1) return;
  if (peer_watch_) peer_watch_->stop();
  ddptrain::announce_failure(*bounded_, env_.rank, env_.world_size, reason, secondary);
  // Rank 0's store ends with its process (under torchrun's agent store it outlives it).
  if (is_main() && !env_.use_agent_store)
    wait_until_read(*bounded_, env_.rank, env_.world_size, std::chrono::milliseconds(2000));
}

void DistContext::dump_flight(const std::string& reason) const {
  if (watchdog_) watchdog_->raise(reason, /*wait_s=*/0);
}

// Note [An earlier start's flight records]
// Readers take any flight_rank<r>.json in the folder as the job's (a failing rank's verdict,
// the launcher's, `ddptrain inspect hang`), so an earlier run's or attempt's records would name
// an old hang. They were removed at any start, which lost a hang's records to the restart it
// caused and to a rerun refused at start. Before this start's watchdogs run, its ranks move them
// into DIR/.flight.previous, where `ddptrain inspect hang DIR/.flight.previous` reads them. Each
// node's local rank 0 does its node's folder (shared or not; a node may hold other ranks than in
// the earlier start): where it holds records, it removes an older hang's from there (one hang's
// records, not a mix of two, whose world sizes a verdict would take), and, after a barrier
// (every rank's: no watchdog starts before), moves every record it found. A collective where
// there is a process group, whatever the recorder's setting (an old record would be read by the
// launcher and `inspect hang` all the same); a file that cannot be moved is said, not thrown
// (the ranks' collectives stay together).
void DistContext::set_aside_earlier_flight_records(const std::string& dir) const {
  const std::vector<int> found = env_.local_rank == 0 ? flight_record_ranks(dir) : std::vector<int>{};
  const auto attempt = [&](const std::function<void()>& move) {
    try {
      move();
    } catch (const std::exception& e) {
      log_.warn(str(e.what(), ": a hang's verdict may name that earlier start's"));
    }
  };
  if (!found.empty()) attempt([&] { clear_previous_flight_records(dir); });
  if (pg_) barrier("setting aside an earlier start's flight records");
  for (int r : found) attempt([&] { set_aside_flight_record(dir, r); });
  if (env_.rank != 0 || found.empty()) return;
  const std::string previous = previous_flight_dir(dir);
  log_.info(str("an earlier start's flight records (ranks ", ranks_list(found), ") moved to ", previous,
                " (`ddptrain inspect hang ", previous, "` reads them)"));
}

void DistContext::set_flight_dir(const std::string& dir) {
  watchdog_.reset();
  if (dir.empty()) return;
  set_aside_earlier_flight_records(dir);
  if (!pg_ || !bounded_ || !recorder_->enabled()) return;
  watchdog_ = std::make_unique<FlightWatchdog>(bounded_, *recorder_, env_.rank, env_.world_size, dir,
                                               env_.launch_dir);
}

}  // namespace ddptrain
