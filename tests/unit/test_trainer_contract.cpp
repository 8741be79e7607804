// The Trainer's contract with a library program, beyond training itself: its optimizer's
// parameter groups keep their own rates under the schedule, fit() runs once, a module must be
// on the rank's device, a run without an identity of its own still resumes only itself, and
// every rank meets the same collectives whatever its own checkpoint folder shows, and a resume
// makes the evaluation its checkpoint owes (the stop: test_trainer_stop.cpp).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "train/owed_evaluation.h"
#include "trainer_fixtures.h"

using namespace ddptrain;
using namespace ddptrain::trainer_test;

namespace {

// What one rank's fit() ended with.
struct RankFit {
  std::string error;  // "" when it trained
  bool usage_error = false;
  int64_t global_step = -1;
};

// Rank 0's checkpoint folder, dir/rank0, holds this run's step-2 checkpoint and rank 1's,
// dir/rank1, none (node-local folders; or rank 1 listed after rank 0 had moved them): world 2
// fits with `o` (its checkpoint.dir replaced by the rank's folder).
std::vector<RankFit> fit_where_only_rank_zero_has_a_checkpoint(const std::string& dir,
                                                               const TrainerOptions& o) {
  TrainerOptions first = quiet_fp32(8, 1);
  first.checkpoint.dir = dir + "/rank0";
  first.loop.max_steps = 2;
  EXPECT_EQ(train_user_net(1, first).result.global_step, 2);
  std::vector<RankFit> out(2);
  testing_dist::run_world(2, [&](const DistContext& ctx) {
    Trainable model = native(make_net());
    const auto optimizer = make_optimizer(*model.module, false);
    TrainerOptions mine = o;
    mine.checkpoint.dir = dir + (ctx.rank() == 0 ? "/rank0" : "/rank1");
    RankFit& r = out[static_cast<size_t>(ctx.rank())];
    try {
      Trainer trainer(ctx, std::move(model), *optimizer, mine);
      UserData train(96, false);
      r.global_step = trainer.fit(train, nullptr).global_step;
    } catch (const std::exception& e) {
      r.error = e.what();
      r.usage_error = dynamic_cast<const UsageError*>(&e) != nullptr;
    }
  });
  return out;
}

}  // namespace

// A parameter group added during the run (a callback at epoch 1's end, at 0.01 where group 0
// has 0.1) is scheduled from the rate it was added with. Before, from group 0's base rate.
TEST(Trainer, AGroupAddedDuringTheRunIsScheduledFromItsOwnRate) {
  struct AddGroup : Callback {
    AddGroup(torch::optim::Optimizer& o, std::vector<at::Tensor> p) : optimizer(o), params(std::move(p)) {}
    void on_epoch_end(const TrainState& s, const EpochEvent&) override {
      if (s.epoch == 1) optimizer.add_param_group({params, std::make_unique<torch::optim::SGDOptions>(0.01)});
    }
    void on_step_end(const TrainState& s, const StepEvent&) override {
      std::vector<double> now;
      for (auto& g : s.optimizer.param_groups()) now.push_back(g.options().get_lr());
      seen.push_back(now);
    }
    torch::optim::Optimizer& optimizer;
    std::vector<at::Tensor> params;
    std::vector<std::vector<double>> seen;
  };
  testing_dist::run_world(1, [&](const DistContext& ctx) {
    Trainable model = native(make_net());
    auto* net = dynamic_cast<UserNet*>(model.module.get());
    ASSERT_NE(net, nullptr);
    torch::optim::SGD optimizer(net->a->parameters(), torch::optim::SGDOptions(0.1));
    TrainerOptions o = quiet_fp32(16, 3);
    o.optim.lr_schedule = LrSchedule::kEpochCosine;
    Trainer trainer(ctx, std::move(model), optimizer, o, Objective::classification());
    auto add = std::make_shared<AddGroup>(optimizer, net->b->parameters());
    trainer.add_callback(add);
    UserData train(96, false);
    trainer.fit(train, nullptr);
    ASSERT_EQ(add->seen.size(), 18u);
    for (size_t i = 6; i < 18; ++i) {
      ASSERT_EQ(add->seen[i].size(), 2u) << "step " << i + 1;
      EXPECT_NEAR(add->seen[i][1], add->seen[i][0] * 0.1, 1e-15) << "step " << i + 1;
    }
  });
}

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
// only a run of the same optimizer, model and sampler seed (Note [Run identity]); before, any
// checkpoint in the folder was resumed, whatever its learning rate or model, and one of
// another seed resumed mid-epoch in the new order (some samples twice, others never).
TEST(Trainer, WithoutAnIdentityOfItsOwnAutoResumesOnlyTheSameOptimizerAndModel) {
  const std::string dir = testing_dist::temp_dir("trainer_default_identity");
  auto fit = [&](double lr, uint64_t seed = 42) {  // "" when it trained, else the UsageError
    std::string error;
    testing_dist::run_world(1, [&](const DistContext& ctx) {
      Trainable model = native(make_net());
      torch::optim::SGD sgd(model.module->parameters(), torch::optim::SGDOptions(lr));
      TrainerOptions o = quiet_fp32(8, 1);
      o.checkpoint.dir = dir;
      o.checkpoint.resume_from = "auto";
      o.loop.max_steps = 3;  // mid-epoch (12 steps an epoch)
      o.loop.seed = seed;
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
  const std::string reseeded = fit(0.1, 7);
  EXPECT_NE(reseeded.find("what differs: seed 7 (the checkpoint's: 42)"), std::string::npos) << reseeded;
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
  o.loop.max_steps = 2;
  for (const RankFit& r : fit_where_only_rank_zero_has_a_checkpoint(dir, o)) {
    EXPECT_EQ(r.error, "");
    EXPECT_EQ(r.global_step, 2);
  }
  EXPECT_TRUE(std::filesystem::is_directory(dir + "/rank0/.superseded")) << "rank 0 set its checkpoint aside";
  std::filesystem::remove_all(dir);
}

// Note [Evaluation owed]: an evaluation that fails (here on every rank, in the last epoch's)
// leaves the epoch's checkpoint owing it. A library program resumed from that checkpoint has
// nothing left to train, but its callbacks get the epoch's end, evaluated, marked
// evaluation_resumed, equal to an uninterrupted run's; the result says it evaluated, the
// weights are the checkpoint's, nothing is saved again; a further resume owes nothing. A stop
// during the owed evaluation, or a resume into another folder, leaves it owed.
TEST(Trainer, AResumeMakesTheEvaluationItsCheckpointOwes) {
  struct Epochs : Callback {
    void on_epoch_end(const TrainState& s, const EpochEvent& e) override {
      seen.push_back({s.epoch, e.train_loss, e.eval ? e.eval->loss : -1.0, e.evaluation_resumed});
    }
    struct Seen {
      int epoch;
      double train_loss, eval_loss;
      bool resumed;
    };
    std::vector<Seen> seen;
  };
  struct FailingEvaluation : LoopHooks {
    void in_evaluation(const DistContext&, int epoch) override {
      if (epoch == 2) throw std::runtime_error("the test's evaluation failure");
    }
  };
  struct Fit {
    TrainResult result;
    std::vector<Epochs::Seen> seen;  // rank 0's
    std::string error;
  };
  int zero_stage = 0;  // and under ZeRO stage 3, where the evaluation's forwards are collectives
  auto fit = [&](const std::string& ckpt, const std::string& resume_from, bool fail, bool stop = false) {
    Fit out;
    std::mutex mu;
    testing_dist::run_world(2, [&](const DistContext& ctx) {
      Trainable model = native(make_net());
      const auto optimizer = make_optimizer(*model.module, false);
      TrainerOptions o = quiet_fp32(8, 2);
      o.checkpoint.dir = ckpt;
      o.checkpoint.resume_from = resume_from;
      o.loop.eval_every = 1;
      o.zero.stage = zero_stage;
      if (stop) o.stop_requested = [] { return 15; };  // a SIGTERM from the start
      Trainer trainer(ctx, std::move(model), *optimizer, o, Objective::classification());
      if (fail) trainer.set_loop_hooks(std::make_shared<FailingEvaluation>());
      auto epochs = std::make_shared<Epochs>();
      trainer.add_callback(epochs);
      UserData train(96, false), test(40, false);
      TrainResult r;
      std::string error;
      try {
        r = trainer.fit(train, &test);
      } catch (const std::exception& e) {
        error = e.what();
      }
      std::lock_guard<std::mutex> lock(mu);
      if (ctx.rank() != 0) return;
      out = {r, epochs->seen, error};
    });
    return out;
  };
  for (const int stage : {0, 3}) {
    SCOPED_TRACE("zero stage " + std::to_string(stage));
    zero_stage = stage;
    const std::string dir = testing_dist::temp_dir("trainer_owed_evaluation_" + std::to_string(stage));
    const Fit whole = fit(dir + "/whole", "", false);
    ASSERT_EQ(whole.error, "");
    ASSERT_EQ(whole.seen.size(), 2u);
    const Fit failed = fit(dir + "/failed", "", true);
    EXPECT_NE(failed.error.find("the test's evaluation failure"), std::string::npos) << failed.error;
    EXPECT_EQ(failed.seen.size(), 1u) << "epoch 2's end came without its evaluation";
    const std::string ckpt = dir + "/failed/epoch_0002";
    ASSERT_TRUE(std::filesystem::exists(ckpt + "/manifest.json"));

    // A stop during the owed evaluation: no record, the checkpoint owes it still.
    const Fit stopped = fit(dir + "/failed", ckpt, false, true);
    EXPECT_EQ(stopped.error, "");
    EXPECT_EQ(stopped.result.stopped_by_signal, 15);
    EXPECT_FALSE(stopped.result.evaluated);
    EXPECT_TRUE(stopped.seen.empty());
    EXPECT_FALSE(std::filesystem::exists(ckpt + "/evaluation.json"));
    // Resumed into another folder: made and reported, but the checkpoint owes its own run still.
    const Fit elsewhere = fit(dir + "/elsewhere", ckpt, false);
    ASSERT_EQ(elsewhere.error, "");
    ASSERT_EQ(elsewhere.seen.size(), 1u);
    EXPECT_EQ(elsewhere.seen[0].eval_loss, whole.seen[1].eval_loss);
    EXPECT_FALSE(std::filesystem::exists(ckpt + "/evaluation.json"));

    const Fit resumed = fit(dir + "/failed", ckpt, false);
    ASSERT_EQ(resumed.error, "");
    EXPECT_NE(resumed.result.nothing_to_train, "");
    ASSERT_EQ(resumed.seen.size(), 1u);
    EXPECT_EQ(resumed.seen[0].epoch, 2);
    EXPECT_TRUE(resumed.seen[0].resumed);
    EXPECT_EQ(resumed.seen[0].train_loss, whole.seen[1].train_loss);
    EXPECT_EQ(resumed.seen[0].eval_loss, whole.seen[1].eval_loss);
    EXPECT_TRUE(resumed.result.evaluated);
    EXPECT_EQ(resumed.result.test_loss, whole.result.test_loss);
    EXPECT_EQ(resumed.result.test_accuracy, whole.result.test_accuracy);
    EXPECT_EQ(resumed.result.fingerprint, whole.result.fingerprint);
    EXPECT_EQ(resumed.result.last_checkpoint, "") << "nothing trained, nothing saved";
    EXPECT_TRUE(std::filesystem::exists(ckpt + "/evaluation.json"));

    const Fit again = fit(dir + "/failed", ckpt, false);
    ASSERT_EQ(again.error, "");
    EXPECT_TRUE(again.seen.empty()) << "a made evaluation is not owed";
    EXPECT_FALSE(again.result.evaluated);
    std::filesystem::remove_all(dir);
  }
}

// A diverged epoch's summary (NaN loss: JSON writes null) reads back from meta.json as NaN.
TEST(Trainer, AnOwedEvaluationsSummaryKeepsANanLoss) {
  EpochPosition p{3, 12, 6, {}};
  EpochEvent e(p);
  e.micro_done = 12;
  e.train_loss = std::numeric_limits<double>::quiet_NaN();
  e.peak_rss_mib = {1.5, 2.5};
  e.skipped_steps = 2;
  CheckpointMeta meta;
  meta.extra[kEvaluationOwedKey] = nlohmann::json::parse(owed_evaluation_json(4, e).dump());
  const std::string dir = testing_dist::temp_dir("trainer_owed_nan");
  std::filesystem::create_directories(dir);
  testing_dist::run_world(1, [&](const DistContext& ctx) {
    const std::optional<OwedEvaluation> owed = owed_evaluation(ctx, meta, dir);
    ASSERT_TRUE(owed.has_value());
    EXPECT_EQ(owed->epoch, 4);
    EXPECT_EQ(owed->position.first_micro, 3);
    const EpochEvent back = owed->event();
    EXPECT_TRUE(std::isnan(back.train_loss));
    EXPECT_EQ(back.peak_rss_mib, e.peak_rss_mib);
    EXPECT_EQ(back.skipped_steps, 2);
    EXPECT_EQ(back.micro_done, 12);
    EXPECT_TRUE(back.evaluation_resumed);
    record_evaluation_made(ctx, dir, 4, EvalResult{});
    EXPECT_FALSE(owed_evaluation(ctx, meta, dir).has_value()) << "made: owed no longer";
  });
  std::filesystem::remove_all(dir);
}

// Note [One checkpoint for every rank]: resume_from auto where rank 0's folder holds this run's
// checkpoint and rank 1's holds none (node-local folders, or a lagging network listing): every
// rank stops with the same error naming rank 1, before anything is loaded. Before, rank 0
// resumed step 2 and rank 1 started fresh, and their collectives parted.
TEST(Trainer, RanksThatChooseDifferentCheckpointsStopTogether) {
  const std::string dir = testing_dist::temp_dir("trainer_auto_differs");
  TrainerOptions o = quiet_fp32(8, 1);
  o.checkpoint.resume_from = "auto";
  o.loop.max_steps = 4;
  for (const RankFit& r : fit_where_only_rank_zero_has_a_checkpoint(dir, o)) {
    EXPECT_TRUE(r.usage_error) << "a rank did not stop with a usage error: " << r.error;
    EXPECT_NE(r.error.find("the ranks chose different checkpoints from"), std::string::npos) << r.error;
  }
  std::filesystem::remove_all(dir);
}

// A resume of an explicit checkpoint that is damaged changes nothing on disk: the claim verifies
// it whole before it sets this run's later checkpoints aside (Note [A run claims its checkpoint
// folder]), and refuses it as the user's to replace (a usage error, which a launcher does not
// restart). Before, they were moved into .superseded first, and a following auto resume
// skipped the damaged one and started fresh.
TEST(Trainer, AResumeThatFailsToLoadSetsNothingAside) {
  const std::string dir = testing_dist::temp_dir("trainer_failed_resume");
  TrainerOptions o = trainer_test::four_steps_saved_every_two(dir);
  ASSERT_EQ(train_user_net(1, o).result.global_step, 4);
  const std::string early = dir + "/step_00000002", late = dir + "/step_00000004";
  ASSERT_TRUE(std::filesystem::exists(late + "/manifest.json"));
  {  // one byte of the model's weights changed: its CRC-32 no longer matches
    std::fstream f(early + "/model.pt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-16, std::ios::end);
    const char c = static_cast<char>(f.get());
    f.seekp(-16, std::ios::end);
    f.put(static_cast<char>(c ^ 0x5a));
  }
  o.checkpoint.resume_from = early;
  try {
    train_user_net(1, o);
    ADD_FAILURE() << "a damaged checkpoint was resumed";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("it cannot be resumed"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(std::filesystem::exists(late + "/manifest.json")) << "the later checkpoint was set aside";
  EXPECT_FALSE(std::filesystem::exists(dir + "/.superseded"));
  o.checkpoint.resume_from = "auto";
  EXPECT_EQ(train_user_net(1, o).result.global_step, 4) << "auto resumes the later checkpoint";
  std::filesystem::remove_all(dir);
}

namespace {

// UserNet's shape with a BatchNorm between: buffers that DDP broadcasts from rank 0.
struct BatchNormNet : torch::nn::Module {
  BatchNormNet() {
    a = register_module("a", torch::nn::Linear(8, 16));
    norm = register_module("norm", torch::nn::BatchNorm1d(16));
    b = register_module("b", torch::nn::Linear(16, 4));
  }
  at::Tensor forward(const at::Tensor& x) { return b(torch::tanh(norm(a(x)))); }
  torch::nn::Linear a{nullptr}, b{nullptr};
  torch::nn::BatchNorm1d norm{nullptr};
};

}  // namespace

// Buffers are broadcast once per accumulation group, before its first forward, as PyTorch's DDP
// skips the sync in a forward after a no_sync backward: one step of 3 micro-batches makes as
// many buffer broadcasts as one of 1 (that forward's and the epoch end's). Before, one per
// micro-batch: each a wait of every rank for the others.
TEST(Trainer, BuffersAreBroadcastOncePerAccumulationGroup) {
  auto buffer_broadcasts = [](int accumulation) {
    int count = 0;
    TrainerOptions o = quiet_fp32(4, 1);
    o.loop.grad_accum_steps = accumulation;
    o.loop.max_steps = 1;
    fit_fresh_net<BatchNormNet>(
        2, o,
        [](BatchNormNet& net) {
          return std::make_unique<torch::optim::SGD>(net.parameters(), torch::optim::SGDOptions(0.1));
        },
        [&](const DistContext& ctx, BatchNormNet&, const TrainResult&) {
          if (ctx.rank() != 0) return;
          const nlohmann::json record = ctx.recorder().to_json(0, 2, "test");
          for (const auto& e : record.at("entries"))
            count += e.at("what").get<std::string>().rfind("buffer broadcast", 0) == 0 ? 1 : 0;
        });
    return count;
  };
  const int one = buffer_broadcasts(1);
  EXPECT_GE(one, 1);
  EXPECT_EQ(buffer_broadcasts(3), one);
}
