// ZeRO and the optimizer's parameter groups as a library user builds them: a group's own
// AMSGrad, groups and tensors ZeRO would never step, a tensor registered under two names.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "trainer_fixtures.h"

using namespace ddptrain;
using namespace ddptrain::trainer_test;

// AMSGrad set on one parameter group only (the defaults' off): its running maximum is a third
// state field of the shard files, and a stage-1 resume ends bitwise equal to the uninterrupted
// run. Before, the fields followed the defaults alone: the maximum was dropped from the files.
// The other group gets no maximum from the files' third row.
TEST(Trainer, ZeroCheckpointsKeepAGroupsAmsgradMaximum) {
  const std::string dir = testing_dist::temp_dir("trainer_zero_amsgrad");
  auto train = [](const TrainerOptions& o) {
    return rank_zero_fit<UserNet>(2, o, [](UserNet& net) -> std::unique_ptr<torch::optim::Optimizer> {
      std::vector<torch::optim::OptimizerParamGroup> groups;
      groups.emplace_back(net.a->parameters(), std::make_unique<torch::optim::AdamWOptions>(0.01));
      auto amsgrad = std::make_unique<torch::optim::AdamWOptions>(0.01);
      amsgrad->amsgrad(true);
      groups.emplace_back(net.b->parameters(), std::move(amsgrad));
      return std::make_unique<torch::optim::AdamW>(std::move(groups), torch::optim::AdamWOptions(0.01));
    });
  };
  TrainerOptions o = quiet_fp32(8, 1);
  o.optim.lr_schedule = LrSchedule::kEpochCosine;  // not over max_steps: the same for the parts
  o.zero.stage = 1;
  const auto whole = train(o);
  o.checkpoint.dir = dir;
  o.loop.max_steps = 4;
  const auto first = train(o);
  ASSERT_FALSE(first.result.last_checkpoint.empty());
  o.loop.max_steps = 0;
  o.checkpoint.resume_from = first.result.last_checkpoint;
  const auto resumed = train(o);
  EXPECT_EQ(resumed.result.global_step, whole.result.global_step);
  EXPECT_EQ(max_diff(resumed.params, whole.params), 0.0);
  // and only that group has a maximum (the others' third row is not theirs: not loaded)
  EXPECT_EQ(resumed.result.optimizer_fingerprint, whole.result.optimizer_fingerprint);
  std::filesystem::remove_all(dir);
}

// ZeRO steps the groups and the parameters it sharded: a group added once the Trainer is built,
// or a tensor the optimizer steps outside the module, would never be stepped (stage 0 steps
// them): a usage error, not a run that silently leaves them as they were.
TEST(Trainer, ZeroRefusesWhatItWouldNeverStep) {
  struct AddsAGroup : Callback {
    explicit AddsAGroup(torch::optim::Optimizer& o) : optimizer(o) {}
    void on_step_end(const TrainState& s, const StepEvent&) override {
      if (s.global_step == 1)
        optimizer.add_param_group({{extra}, std::make_unique<torch::optim::SGDOptions>(0.1)});
    }
    torch::optim::Optimizer& optimizer;
    at::Tensor extra = torch::zeros({3}, torch::requires_grad());
  };
  std::vector<std::string> errors(2);
  testing_dist::run_world(2, [&](const DistContext& ctx) {
    for (const bool outside : {false, true}) {
      Trainable model = native(make_net());
      auto optimizer = make_optimizer(*model.module, false);
      at::Tensor stray = torch::zeros({2}, torch::requires_grad());
      if (outside) optimizer->add_param_group({{stray}, std::make_unique<torch::optim::SGDOptions>(0.1)});
      TrainerOptions o = quiet_fp32(8, 1);
      o.zero.stage = 1;
      try {
        Trainer trainer(ctx, std::move(model), *optimizer, o);
        trainer.add_callback(std::make_shared<AddsAGroup>(*optimizer));
        UserData train(96, false);
        trainer.fit(train, nullptr);
      } catch (const UsageError& e) {
        if (ctx.rank() == 0) errors[outside ? 1 : 0] = e.what();
      }
    }
  });
  EXPECT_NE(errors[0].find("parameter groups changed after ZeRO sharded them (1 groups then, 2 now)"),
            std::string::npos)
      << errors[0];
  EXPECT_NE(errors[1].find("1 parameter tensors the optimizer steps are not the module's, and zero.stage 1"),
            std::string::npos)
      << errors[1];
}

// A module that registers a submodule under two names (LibTorch's parameters() then lists its
// tensors twice, as it does a TorchScript model's tied weights): DDP, the clipping norm and
// ZeRO hold each tensor once, so it trains as the module registered once, at stages 0 and 1,
// with clipping (the norm counted `a` twice before); an optimizer given a tensor twice is
// refused (LibTorch's would step it twice).
TEST(Trainer, ATensorRegisteredTwiceTrainsOnce) {
  struct TwiceNet : UserNet {
    TwiceNet() { register_module("a_again", a.ptr()); }
  };
  for (int stage : {0, 1}) {
    TrainerOptions o = quiet_fp32(8, 1);
    o.optim.clip_grad_norm = 0.05;
    o.zero.stage = stage;
    const auto sgd = [](torch::nn::Module& net) -> std::unique_ptr<torch::optim::Optimizer> {
      return std::make_unique<torch::optim::SGD>(unique_parameters(net),
                                                 torch::optim::SGDOptions(0.1).momentum(0.9));
    };
    const auto once = rank_zero_fit<UserNet>(2, o, sgd);
    const auto twice = rank_zero_fit<TwiceNet>(2, o, sgd);
    ASSERT_EQ(twice.params.size(), once.params.size() + 2);
    const std::vector<at::Tensor> first(twice.params.begin(), twice.params.begin() + 4);
    EXPECT_EQ(max_diff(first, once.params), 0.0) << "stage " << stage;
  }
  try {
    rank_zero_fit<TwiceNet>(
        1, quiet_fp32(8, 1), [](TwiceNet& net) -> std::unique_ptr<torch::optim::Optimizer> {
          return std::make_unique<torch::optim::SGD>(net.parameters(), torch::optim::SGDOptions(0.1));
        });
    ADD_FAILURE() << "an optimizer holding a tensor twice was taken";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("2 parameter tensors are in the optimizer's groups more than once"),
              std::string::npos)
        << e.what();
  }
}
