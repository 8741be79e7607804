// Note [An agent store outlives its attempts]: the ranks of an attempt agree on a name on a
// store that earlier attempts used (a real TCPStore served by the test, as torchrun's agent
// serves it), whatever their restart counts and whoever comes first.
#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "../common/free_port.h"
#include "dist/attempt_name.h"
#include "dist/rendezvous_barrier.h"
#include "dist_harness.h"

namespace ddptrain {
namespace {

// The agent's store: a server every attempt's clients reach.
struct AgentStore {
  AgentStore() {
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(testing_common::free_port());
    so.isServer = true;
    so.waitWorkers = false;
    server = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
    port = so.port;
  }
  c10::intrusive_ptr<c10d::TCPStore> client() const {
    c10d::TCPStoreOptions so;
    so.port = port;
    so.isServer = false;
    so.waitWorkers = false;
    so.timeout = std::chrono::seconds(10);
    return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  }
  c10::intrusive_ptr<c10d::TCPStore> server;
  uint16_t port = 0;
};

// Each rank's name (or its error's text) in an attempt of `world` ranks; rank r starts after
// delay_ms[r] and waits at most `within`.
std::vector<std::string> attempt(const AgentStore& agent, int world, const std::vector<int>& delay_ms,
                                 std::chrono::milliseconds within = std::chrono::seconds(20)) {
  std::vector<std::string> names(static_cast<size_t>(world));
  std::vector<std::thread> ranks;
  const Clock::time_point start = Clock::now();
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      auto store = agent.client();
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms[static_cast<size_t>(r)]));
      try {
        names[static_cast<size_t>(r)] = agree_on_attempt_name(*store, r, world, start + within);
      } catch (const RendezvousIncomplete& e) {
        names[static_cast<size_t>(r)] = std::string("incomplete: ") + e.what();
      }
    });
  for (auto& t : ranks) t.join();
  return names;
}

TEST(AttemptName, TheRanksOfAnAttemptAgreeAndEachAttemptHasItsOwn) {
  AgentStore agent;
  // Rank 0 first, then last, then in between: an earlier attempt's hellos are in the store.
  const std::vector<std::vector<int>> orders = {{0, 150, 300, 80}, {300, 0, 50, 100}, {100, 200, 0, 0}};
  std::vector<std::string> seen;
  for (const auto& delays : orders) {
    const std::vector<std::string> names = attempt(agent, 4, delays);
    ASSERT_EQ(names[0].size(), 32u) << names[0];
    for (int r = 1; r < 4; ++r) EXPECT_EQ(names[static_cast<size_t>(r)], names[0]) << "rank " << r;
    for (const auto& earlier : seen) EXPECT_NE(names[0], earlier);
    seen.push_back(names[0]);
  }
  // A world of one agrees with itself, at once.
  EXPECT_EQ(attempt(agent, 1, {0})[0].size(), 32u);
}

TEST(AttemptName, ARankThatDoesNotComeEndsTheOthersAtTheDeadline) {
  AgentStore agent;
  // A first attempt: rank 0 counts the hellos said.
  const std::vector<std::string> first = attempt(agent, 3, {0, 0, 2500}, std::chrono::milliseconds(1000));
  EXPECT_EQ(first[0], "incomplete: 2 of the job's 3 ranks joined");
  attempt(agent, 3, {0, 0, 0});  // an earlier attempt: rank 2's hello is in the store
  const Clock::time_point start = Clock::now();
  // Rank 2 comes after the deadline.
  const std::vector<std::string> names = attempt(agent, 3, {0, 0, 2500}, std::chrono::milliseconds(1000));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(6));
  EXPECT_EQ(names[0], "incomplete: 2 of the job's 3 ranks joined");
  // Rank 1 was welcomed (its barrier under the name ends at the deadline); rank 2 came too late.
  EXPECT_EQ(names[1].size(), 32u) << names[1];
  EXPECT_EQ(names[2], "incomplete: not all of the job's 3 ranks joined");
}

// Two attempts of a world-2 job on one agent store, the ranks' restart counts apart (as after
// another node's failure) and then alike: each attempt's ranks meet and reduce (keyed by their
// counts they did not meet, and ranks of one count read an earlier attempt's Gloo addresses).
TEST(AttemptName, AttemptsOnTheAgentsStoreMeetWhateverTheirRestartCounts) {
  AgentStore agent;
  DistOptionsResolved opts{"gloo"};
  opts.rendezvous_timeout = std::chrono::seconds(10);
  for (const std::vector<int>& counts :
       {std::vector<int>{0, 1}, std::vector<int>{1, 1}, std::vector<int>{1, 1}}) {
    std::vector<double> sums(2, 0);
    testing_dist::run_ranks(
        2,
        [&](const DistContext& ctx) {
          std::vector<at::Tensor> t{at::full({1}, static_cast<double>(ctx.rank() + 1), at::kDouble)};
          ctx.all_reduce_sum(t);
          sums[static_cast<size_t>(ctx.rank())] = t[0].item<double>();
        },
        60, opts,
        [&](EnvContract& env) {
          env.use_agent_store = true;
          env.master_port = agent.port;
          env.restart_count = counts[static_cast<size_t>(env.rank)];
        });
    EXPECT_EQ(sums, std::vector<double>({3.0, 3.0}));
  }
}

}  // namespace
}  // namespace ddptrain
