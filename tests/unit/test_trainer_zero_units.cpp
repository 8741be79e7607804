// ZeRO stage 3 over units that differ between the ranks (Note [The ranks build the same
// units]): every rank stops in seconds with an error that says where each rank was, instead of
// Gloo aborting the process on mismatched sizes or a wait for the timeout. And a unit's
// parameter that some ranks leave out (Note [Unused parameters and collectives in backward]).
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ddp/shard_as_built.h"
#include "trainer_fixtures.h"

using namespace ddptrain;
using namespace ddptrain::trainer_test;

namespace {

// Trains `make`'s module at stage 3, world 2; each rank's error ("" where none).
std::vector<std::string> errors_of_stage_three(const std::function<Trainable(const DistContext&)>& make,
                                               const std::string& expected = "do not build the same units") {
  TrainerOptions o = quiet_fp32(8, 1);
  o.zero.stage = 3;
  std::vector<std::string> errors(2);
  const auto start = std::chrono::steady_clock::now();
  testing_dist::run_ranks(
      2,
      [&](const DistContext& ctx) {
        try {
          Trainable net = make(ctx);
          const auto optimizer = make_optimizer(*net.module, /*adamw=*/false);
          Trainer trainer(ctx, std::move(net), *optimizer, o);
          UserData train(96, false);
          trainer.fit(train, nullptr);
        } catch (const std::exception& e) {
          errors[static_cast<size_t>(ctx.rank())] = e.what();
        }
      },
      /*timeout_s=*/30);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20)) << "a wait for the timeout";
  for (const std::string& e : errors) EXPECT_NE(e.find(expected), std::string::npos) << e;
  return errors;
}

Trainable built_sharded(const DistContext& ctx, bool with_sink, int64_t hidden, bool b_is_a_unit) {
  ShardAsBuilt sink(ctx);
  return trainable(std::make_shared<UserNet>(
      UserNetShape{b_is_a_unit, UnitBackward::kReadsParameters, hidden, with_sink ? &sink : nullptr}));
}

bool says(const std::string& e, const std::string& what) { return e.find(what) != std::string::npos; }

}  // namespace

// Rank 1 makes b a unit too (no sink): the same parameters, so DDP's replica check passed, and
// the ranks gathered different shards in the first forward (Gloo aborted the process).
TEST(Trainer, ZeroStageThreeRefusesUnitsThatDifferBetweenTheRanks) {
  const auto errors = errors_of_stage_three([](const DistContext& ctx) {
    const std::shared_ptr<UserNet> net = make_net({/*b_is_a_unit=*/ctx.rank() == 1});
    return trainable(net);
  });
  for (const std::string& e : errors) {
    EXPECT_TRUE(says(e, "rank 0 had built its whole model, 1 unit")) << e;
    EXPECT_TRUE(says(e, "rank 1 had built its whole model, 2 units")) << e;
  }
}

// Rank 1's unit a says its backward reads no parameters: it would not gather a again for its
// backward while rank 0 would (DDP's check compares parameters, not units).
TEST(Trainer, ZeroStageThreeRefusesAUnitBackwardThatDiffersBetweenTheRanks) {
  const auto errors = errors_of_stage_three([](const DistContext& ctx) {
    const std::shared_ptr<UserNet> net = make_net(
        {false, ctx.rank() == 1 ? UnitBackward::kReadsNoParameters : UnitBackward::kReadsParameters});
    return trainable(net);
  });
  for (const std::string& e : errors) {
    EXPECT_TRUE(says(e, "rank 0 had built its whole model, 1 unit")) << e;
    EXPECT_TRUE(says(e, "rank 1 had built its whole model, 1 unit")) << e;
  }
  EXPECT_TRUE(says(errors[1], "backward reads no parameters")) << errors[1];
}

// Units sharded as built broadcast as the model is built: each case stopped the ranks in the
// build's collectives (other sizes: Gloo's abort; another collective: the timeout).
TEST(Trainer, ZeroStageThreeRefusesUnitsShardedAsBuiltThatDifferBetweenTheRanks) {
  // Unit a of another shape on rank 1: both ranks stop at unit 0, before its broadcasts.
  auto errors = errors_of_stage_three(
      [](const DistContext& ctx) { return built_sharded(ctx, true, ctx.rank() == 1 ? 12 : 16, false); });
  for (const std::string& e : errors) {
    EXPECT_TRUE(says(e, "rank 0 built unit 0")) << e;
    EXPECT_TRUE(says(e, "rank 1 built unit 0")) << e;
  }
  EXPECT_TRUE(says(errors[1], "weight [12, 8]")) << errors[1];
  // One more unit on rank 1: rank 0 is at the Trainer's check, rank 1 at its unit 1.
  errors = errors_of_stage_three(
      [](const DistContext& ctx) { return built_sharded(ctx, true, 16, ctx.rank() == 1); });
  for (const std::string& e : errors) {
    EXPECT_TRUE(says(e, "rank 0 had built its whole model, 1 unit")) << e;
    EXPECT_TRUE(says(e, "rank 1 built unit 1")) << e;
  }
  // A sink on rank 0 only.
  errors = errors_of_stage_three(
      [](const DistContext& ctx) { return built_sharded(ctx, ctx.rank() == 0, 16, false); });
  for (const std::string& e : errors) {
    EXPECT_TRUE(says(e, "rank 0 built unit 0")) << e;
    EXPECT_TRUE(says(e, "rank 1 had built its whole model, 1 unit")) << e;
  }
}

namespace {

// Three units and a head; unit 2 holds `gate`, which a forward uses only where its batch's sum
// is positive: in some steps one rank uses it and the other does not.
struct GatedUnitsNet : torch::nn::Module {
  GatedUnitsNet() {
    l0 = register_module("l0", torch::nn::Linear(8, 16));
    l1 = register_module("l1", torch::nn::Linear(16, 16));
    block = register_module("block", std::make_shared<torch::nn::Module>());
    l2 = block->register_module("l2", torch::nn::Linear(16, 16));
    gate = block->register_module("gate", torch::nn::Linear(16, 16));
    head = register_module("head", torch::nn::Linear(16, 4));
    units_.add(l0.ptr(), "l0");
    units_.add(l1.ptr(), "l1");
    units_.add(block, "block");
  }
  at::Tensor forward(const at::Tensor& x) {
    const bool use_gate = x.sum().item<double>() > 0;
    used.push_back(use_gate);
    at::Tensor h = torch::tanh(units_.run(0, [&] { return l0(x); }));
    h = torch::tanh(units_.run(1, [&] { return l1(h); }));
    h = units_.run(2, [&] { return use_gate ? l2(h) + gate(h) : l2(h); });
    return head(torch::tanh(h));
  }
  Units& units() { return units_; }
  torch::nn::Linear l0{nullptr}, l1{nullptr}, l2{nullptr}, gate{nullptr}, head{nullptr};
  std::shared_ptr<torch::nn::Module> block;
  Units units_;
  std::vector<bool> used;
};

}  // namespace

// Note [Unused parameters and collectives in backward]: find_unused_parameters with a unit's
// parameter that one rank uses and another not in the same step. Under zero_stage 3 the ranks
// launched that unit's bucket at other points among the backward's gathers (one during backward,
// one after it): their collectives parted (Gloo aborts the process). Every bucket now launches
// after backward there, and stage 3 trains as stage 0.
TEST(Trainer, ZeroStageThreeWithAUnitsParameterSomeRanksLeaveOut) {
  std::map<int, std::vector<at::Tensor>> params;
  bool ranks_differed = false;
  for (int stage : {0, 3}) {
    TrainerOptions o = quiet_fp32(8, 1);
    o.ddp.find_unused_parameters = true;
    o.zero.stage = stage;
    std::vector<std::vector<bool>> used(2);
    fit_fresh_net<GatedUnitsNet>(
        2, o, [](GatedUnitsNet& net) { return make_optimizer(net, false); },
        [&](const DistContext& ctx, GatedUnitsNet& net, const TrainResult&) {
          used[static_cast<size_t>(ctx.rank())] = net.used;
          if (ctx.rank() != 0) return;
          for (const auto& p : net.parameters()) params[stage].push_back(p.detach().clone());
        });
    ranks_differed = ranks_differed || used[0] != used[1];
  }
  ASSERT_TRUE(ranks_differed) << "the test needs a step where one rank uses gate and the other not";
  ASSERT_EQ(params[3].size(), params[0].size());
  EXPECT_LE(max_diff(params[0], params[3]), 1e-6);
}

namespace {

// Unit a's weight is also the head's (tied): registered in the root too.
struct TiedAcrossUnitNet : torch::nn::Module {
  TiedAcrossUnitNet() {
    a = register_module("a", torch::nn::Linear(8, 8));
    head_weight = register_parameter("head_weight", a->weight);
    units_.add(a.ptr(), "a");
  }
  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor h = torch::tanh(units_.run(0, [&] { return a(x); }));
    return at::linear(h, head_weight).narrow(1, 0, 4);
  }
  Units& units() { return units_; }
  torch::nn::Linear a{nullptr};
  at::Tensor head_weight;
  Units units_;
};

}  // namespace

// A weight tied between a unit and the root: the unit freed it after its forward and the head
// read freed memory (a crash). Refused at the start on every rank, naming both places.
TEST(Trainer, ZeroStageThreeRefusesAUnitsWeightTiedOutsideIt) {
  const auto errors = errors_of_stage_three(
      [](const DistContext&) {
        std::shared_ptr<TiedAcrossUnitNet> net;
        {
          static std::mutex mu;  // the default generator: one rank at a time
          std::lock_guard<std::mutex> lock(mu);
          torch::manual_seed(5);
          net = std::make_shared<TiedAcrossUnitNet>();
        }
        return trainable(net);
      },
      "a parameter of unit 0 ('a') is registered outside it too");
  for (const std::string& e : errors) {
    EXPECT_TRUE(says(e, "'a.weight'")) << e;
    EXPECT_TRUE(says(e, "'head_weight'")) << e;
  }
}
