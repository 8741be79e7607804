// Runs a function on N ranks as threads of this process, each with its own DistContext over
// real Gloo on loopback and a real TCPStore (as c10d's own tests do).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../common/free_port.h"
#include "dist/dist_context.h"

namespace ddptrain::testing_dist {

/// Calls fn(ctx) on `world` ranks concurrently; rethrows the first rank's exception. `opts`
/// (Gloo by default) gives the contexts' backend, timeout and strict device; `adjust` changes
/// each rank's environment (a launcher's variables) before its context is made.
inline void run_ranks(int world, const std::function<void(const DistContext&)>& fn, int timeout_s = 60,
                      DistOptionsResolved opts = {"gloo"},
                      const std::function<void(EnvContract&)>& adjust = nullptr) {
  opts.timeout = std::chrono::seconds(timeout_s);
  const int port = testing_common::free_port();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  // LibTorch 2.x keeps one c10d flight recorder per process, and the first record of a process
  // group inserts into its map unlocked: two ranks of one process enqueueing their first
  // collective at once can corrupt it (seen: SIGSEGV in FlightRecorder::recordWithResetEnabled
  // under ProcessGroupGloo::enqueue). Ranks here are threads of one process, so each enqueues a
  // first all-reduce in rank order before running fn (processes, as in production, are
  // unaffected). The strict device stages asynchronous collectives synchronously: not there.
  std::mutex first_mu;
  std::condition_variable first_cv;
  int next_to_enqueue = 0;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        EnvContract env;
        env.rank = r;
        env.world_size = world;
        env.local_rank = r;
        env.local_world_size = world;
        env.master_addr = "127.0.0.1";
        env.master_port = port;
        if (adjust) adjust(env);
        DistContext ctx(env, opts);
        if (!opts.strict_device) {
          std::vector<at::Tensor> t{at::zeros({1})};
          std::unique_lock<std::mutex> lock(first_mu);
          first_cv.wait(lock, [&] { return next_to_enqueue == r; });
          auto work = ctx.all_reduce_sum_async(t);
          ++next_to_enqueue;
          first_cv.notify_all();
          lock.unlock();
          ctx.wait(work, "first all_reduce of the test's ranks");
        }
        fn(ctx);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

/// world 1: fn on a context without a process group (a plain single process); else run_ranks.
inline void run_world(int world, const std::function<void(const DistContext&)>& fn) {
  if (world > 1) return run_ranks(world, fn);
  DistContext solo(EnvContract{}, {"auto", std::chrono::seconds(30)});
  fn(solo);
}

/// An empty scratch directory for one test of this process: <tmp>/ddptrain_<name>_<pid>.
inline std::string temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("ddptrain_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d.string();
}

/// per_step[r][s]: rank r's flattened state after step s. Every rank must equal rank 0 bitwise.
inline void expect_ranks_bitwise_equal(const std::vector<std::vector<at::Tensor>>& per_step) {
  for (size_t r = 1; r < per_step.size(); ++r)
    for (size_t s = 0; s < per_step[0].size(); ++s)
      EXPECT_TRUE(per_step[0][s].equal(per_step[r][s]))
          << "rank " << r << " differs from rank 0 after step " << s + 1;
}

}  // namespace ddptrain::testing_dist
