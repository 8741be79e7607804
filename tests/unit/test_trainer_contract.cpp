// The Trainer's contract with a library program, beyond training itself: its optimizer's
// parameter groups keep their own rates under the schedule, fit() runs once, a module must be
// on the rank's device, a run without an identity of its own still resumes only itself, and
// every rank meets the same collectives whatever its own checkpoint folder shows.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "trainer_fixtures.h"

using namespace ddptrain;
using namespace ddptrain::trainer_test;

// A library user's optimizer with two parameter groups of their own learning rates: the
// schedule scales each from its own initial rate, as PyTorch's schedulers do (each group's
// initial_lr). Before, every group was set to group 0's scheduled rate from the first step.
TEST(Trainer, EachParameterGroupFollowsTheScheduleFromItsOwnRate) {
  struct Lrs : Callback {
    void on_step_end(const TrainState& s, const StepEvent&) override {
      std::vector<double> now;
      for (auto& g : s.optimizer.param_groups()) now.push_back(g.options().get_lr());
      seen.push_back(now);
    }
    std::vector<std::vector<double>> seen;
  };
  for (const LrSchedule schedule : {LrSchedule::kStepCosine, LrSchedule::kEpochCosine}) {
    testing_dist::run_world(1, [&](const DistContext& ctx) {
      Trainable model = native(make_net());
      auto* net = dynamic_cast<UserNet*>(model.module.get());
      ASSERT_NE(net, nullptr);
      std::vector<torch::optim::OptimizerParamGroup> groups;
      groups.emplace_back(net->a->parameters(), std::make_unique<torch::optim::SGDOptions>(0.1));
      groups.emplace_back(net->b->parameters(), std::make_unique<torch::optim::SGDOptions>(0.01));
      torch::optim::SGD optimizer(std::move(groups), torch::optim::SGDOptions(0.1));
      TrainerOptions o = quiet_fp32(16, 3);
      o.optim.lr_schedule = schedule;
      if (schedule == LrSchedule::kStepCosine) o.optim.warmup_steps = 3;
      Trainer trainer(ctx, std::move(model), optimizer, o, Objective::classification());
      auto lrs = std::make_shared<Lrs>();
      trainer.add_callback(lrs);
      UserData train(96, false);
      trainer.fit(train, nullptr);
      EXPECT_THROW(trainer.fit(train, nullptr), UsageError) << "a second fit of one Trainer";
      ASSERT_EQ(lrs->seen.size(), 18u);
      std::set<double> distinct;
      for (const auto& now : lrs->seen) {
        ASSERT_EQ(now.size(), 2u);
        EXPECT_NEAR(now[1], now[0] * 0.1, 1e-15) << "group 1 left its own rate";
        distinct.insert(now[0]);
      }
      EXPECT_GE(distinct.size(), 3u) << "the schedule did not move the rates";
    });
  }
}

// A module left on another device than the rank's (a GPU's where there is one: the README's
// snippet once forgot module->to(ctx.device())) is named before anything runs. On a CPU
// machine the rank's device is the CPU: a module on the meta device stands in for the other.
TEST(Trainer, AModuleOffTheRanksDeviceIsNamed) {
  struct OffDevice : torch::nn::Module {  // LibTorch's Module::to(kMeta) cannot move a Linear
    OffDevice() {
      w = register_parameter("w", torch::zeros({8, 4}, torch::TensorOptions().device(torch::kMeta)));
    }
    at::Tensor forward(const at::Tensor& x) { return x.matmul(w); }
    at::Tensor w;
  };
  testing_dist::run_world(1, [&](const DistContext& ctx) {
    auto net = std::make_shared<OffDevice>();
    torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.1));
    try {
      Trainer trainer(ctx, trainable(net), optimizer, quiet_fp32(8, 1), Objective::classification());
      ADD_FAILURE() << "a module on the meta device was taken";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("the module's parameter 'w' is on meta and this rank's device "
                                           "is cpu: move the module there"),
                std::string::npos)
          << e.what();
    }
  });
}

// A library program that names no run identity of its own: resume_from auto still continues
// only a run of the same optimizer and model (Note [Run identity]); before, any checkpoint in
// the folder was resumed, whatever its learning rate or model.
TEST(Trainer, WithoutAnIdentityOfItsOwnAutoResumesOnlyTheSameOptimizerAndModel) {
  const std::string dir = testing_dist::temp_dir("trainer_default_identity");
  auto fit = [&](double lr) {  // "" when it trained, else the UsageError
    std::string error;
    testing_dist::run_world(1, [&](const DistContext& ctx) {
      Trainable model = native(make_net());
      torch::optim::SGD sgd(model.module->parameters(), torch::optim::SGDOptions(lr));
      TrainerOptions o = quiet_fp32(8, 1);
      o.checkpoint.dir = dir;
      o.checkpoint.resume_from = "auto";
      o.loop.max_steps = 3;
      try {
        Trainer trainer(ctx, std::move(model), sgd, o);
        UserData train(96, false);
        trainer.fit(train, nullptr);
      } catch (const UsageError& e) {
        error = e.what();
      }
    });
    return error;
  };
  EXPECT_EQ(fit(0.1), "");
  const std::string other = fit(0.05);
  EXPECT_NE(other.find("what differs: learning rates 0.05 (the checkpoint's: 0.1)"), std::string::npos)
      << other;
  EXPECT_EQ(fit(0.1), "") << "the same run resumes (nothing left to train)";
  std::filesystem::remove_all(dir);
}

// A fresh start where rank 0's checkpoint folder holds this run's checkpoints and rank 1's
// holds none (node-local folders; or rank 1 listed after rank 0 had set them aside): every rank
// meets the setting aside's barrier. It was met only by ranks that saw this run's checkpoints,
// so the ranks' collectives parted (under torchrun 1.13 the job hung).
TEST(Trainer, AFreshStartMeetsTheSameCollectivesWhateverARanksFolderShows) {
  const std::string dir = testing_dist::temp_dir("trainer_aside");
  TrainerOptions o = quiet_fp32(8, 1);
  o.checkpoint.dir = dir + "/rank0";
  o.loop.max_steps = 2;
  ASSERT_EQ(train_user_net(1, o).result.global_step, 2);  // this run's step-2 checkpoint
  std::string error;
  std::mutex mu;
  testing_dist::run_world(2, [&](const DistContext& ctx) {
    Trainable model = native(make_net());
    const auto optimizer = make_optimizer(*model.module, false);
    TrainerOptions mine = o;
    mine.checkpoint.dir = dir + (ctx.rank() == 0 ? "/rank0" : "/rank1");
    try {
      Trainer trainer(ctx, std::move(model), *optimizer, mine);
      UserData train(96, false);
      EXPECT_EQ(trainer.fit(train, nullptr).global_step, 2);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu);
      error += e.what();
    }
  });
  EXPECT_EQ(error, "");
  EXPECT_TRUE(std::filesystem::is_directory(dir + "/rank0/.superseded")) << "rank 0 set its checkpoint aside";
  std::filesystem::remove_all(dir);
}
