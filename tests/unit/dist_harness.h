// Runs a function on N ranks as threads of this process, each with its own DistContext over
// real Gloo on loopback and a real TCPStore (as c10d's own tests do).
#pragma once

#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "../common/free_port.h"
#include "dist/dist_context.h"

namespace ddptrain::testing_dist {

/// Calls fn(ctx) on `world` ranks concurrently; rethrows the first rank's exception.
inline void run_ranks(int world, const std::function<void(const DistContext&)>& fn, int timeout_s = 60) {
  const int port = testing_common::free_port();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
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
        DistContext ctx(env, {"gloo", std::chrono::seconds(timeout_s)});
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

}  // namespace ddptrain::testing_dist
