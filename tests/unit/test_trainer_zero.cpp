// ZeRO through the Trainer, as a library user asks for it (zero.stage): stages 1-3 train as
// DDP does, and their checkpoints resume at any stage and reshard to any world size, with
// the user's module of trainer_fixtures.h over real Gloo.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddp/shard_as_built.h"
#include "trainer_fixtures.h"

using namespace ddptrain;
using namespace ddptrain::trainer_test;

// Notes [ZeRO stage 1] and [ZeRO stage 2]: sharding the optimizer's state, and the gradients,
// trains as DDP does, with SGD and AdamW (two groups: decay and none), at world 2 and 4.
TEST(Trainer, ZeroStagesTrainAsStageZero) {
  for (bool adamw : {false, true})
    for (int world : {2, 4}) {
      TrainerOptions o = quiet_fp32(8, 2);
      o.loop.eval_every = 1;  // stage 3 evaluates with its units gathered one at a time
      // 33 test samples: rank 0 evaluates 17 (3 batches of 8) at world 2 and 9 (2) at world 4,
      // the others 16 or 8 (2 or 1): every rank still runs as many forwards (stage 3's gathers).
      const int64_t test_size = 33;
      const Trained zero = train_user_net(world, o, mse(), true, native, adamw, {}, false, test_size);
      ASSERT_TRUE(zero.result.evaluated);
      for (int stage : {1, 2, 3}) {
        o.zero.stage = stage;
        const Trained z = train_user_net(world, o, mse(), true, native, adamw, {}, false, test_size);
        const double diff = max_diff(zero.params, z.params);
        std::printf("%s world %d: stage %d vs stage 0 max |weight diff| %g, optimizer state %s\n",
                    adamw ? "adamw" : "sgd", world, stage, diff,
                    zero.result.optimizer_fingerprint == z.result.optimizer_fingerprint ? "bitwise equal"
                                                                                        : "differs");
        EXPECT_LE(diff, 1e-6) << (adamw ? "adamw" : "sgd") << " world " << world << " stage " << stage;
        EXPECT_EQ(z.result.global_step, zero.result.global_step);
        EXPECT_TRUE(z.result.evaluated);
        EXPECT_NEAR(z.result.test_loss, zero.result.test_loss, 1e-6) << "stage " << stage;
        EXPECT_NE(z.result.optimizer_fingerprint,
                  train_user_net(world, quiet_fp32(8, 0)).result.optimizer_fingerprint)
            << "the gathered state is empty";
      }
    }
}

// Stages 2 and 3 with what needs the whole gradient: accumulation (no_sync), clipping (the norm
// from the shards), the loss scaler (unscaled shards, the inf flag agreed; a NaN loss on one
// rank skips the step on every rank) and bf16 autocast, as stage 0.
TEST(Trainer, ZeroStagesTwoAndThreeWithAccumulationClippingTheScalerAndBf16) {
  TrainerOptions o = quiet_fp32(4, 2);
  o.loop.grad_accum_steps = 2;
  o.optim.clip_grad_norm = 0.05;  // small enough to clip every step
  o.precision.grad_scaler = ScalerMode::kOn;
  o.precision.scaler_init_scale = 256;
  FaultPlan nan;
  nan.nan_at_step = 3;  // rank 1's loss is NaN in step 3
  nan.rank = 1;
  const Trained zero = train_user_net(2, o, mse(), true, native, true, nan);
  EXPECT_GT(max_diff(zero.params, train_user_net(2, o, mse(), true, native, true).params), 0.0)
      << "the NaN step was not skipped";
  TrainerOptions bf16 = quiet_fp32(4, 2);
  bf16.precision.amp_dtype = AmpDtype::kBf16;
  bf16.precision.use_amp = true;
  bf16.precision.grad_scaler = ScalerMode::kOff;
  const Trained zero_bf16 = train_user_net(2, bf16, mse(), true, native, true);
  const Trained fp32 = train_user_net(2, quiet_fp32(4, 2), mse(), true, native, true);
  EXPECT_GT(max_diff(zero_bf16.params, fp32.params), 1e-6) << "bf16 autocast changed nothing: was it on?";
  // Stage 1 has the whole gradient (all-reduced as stage 0): bitwise, clipping included. Stages
  // 2 and 3 sum the clipping norm from the shards, in another order: within 1e-6 (docs/precision-memory.md).
  TrainerOptions one = o;
  one.zero.stage = 1;
  EXPECT_EQ(max_diff(zero.params, train_user_net(2, one, mse(), true, native, true, nan).params), 0.0)
      << "stage 1";
  for (int stage : {2, 3}) {
    o.zero.stage = stage;
    const Trained z = train_user_net(2, o, mse(), true, native, true, nan);
    const double diff = max_diff(zero.params, z.params);
    std::printf(
        "accumulation 2, clipping 0.05, scaler on, a NaN on rank 1: stage %d vs stage 0 max |weight diff| "
        "%g\n",
        stage, diff);
    EXPECT_LE(diff, 1e-6) << "stage " << stage;
    EXPECT_EQ(z.result.global_step, zero.result.global_step);
    EXPECT_EQ(z.steps.size(), zero.steps.size());
    EXPECT_GT(max_diff(z.params, train_user_net(2, quiet_fp32(4, 0), mse(), true).params), 1e-3)
        << "nothing trained";
    // bf16 autocast: the shards step the same fp32 master weights.
    bf16.zero.stage = stage;
    const Trained z_bf16 = train_user_net(2, bf16, mse(), true, native, true);
    std::printf("bf16 autocast: stage %d vs stage 0 max |weight diff| %g\n", stage,
                max_diff(zero_bf16.params, z_bf16.params));
    EXPECT_LE(max_diff(zero_bf16.params, z_bf16.params), 1e-6) << "stage " << stage;
  }
}

// A stage-1, -2 or -3 checkpoint taken mid-epoch resumes at stages 3, 2, 1 and 0, each bitwise
// equal to the uninterrupted run (the checkpoint holds the gathered, stage-0 format state).
TEST(Trainer, ZeroCheckpointsResumeAtAnyStage) {
  const std::string dir = testing_dist::temp_dir("trainer_zero");
  for (int written : {1, 2, 3})
    for (bool adamw : {false, true}) {
      TrainerOptions o = quiet_fp32(8, 2);
      o.optim.lr_schedule = LrSchedule::kEpochCosine;
      o.zero.stage = written;
      o.checkpoint.dir = dir + "/whole";
      const Trained whole = train_user_net(2, o, mse(), true, native, adamw);
      o.checkpoint.dir = dir + "/parts";
      o.loop.max_steps = 4;
      const Trained first = train_user_net(2, o, mse(), true, native, adamw);
      ASSERT_FALSE(first.result.last_checkpoint.empty());
      o.loop.max_steps = 0;
      o.checkpoint.resume_from = first.result.last_checkpoint;
      for (int stage : {3, 2, 1, 0}) {
        o.zero.stage = stage;
        const Trained resumed = train_user_net(2, o, mse(), true, native, adamw);
        ASSERT_FALSE(resumed.steps.empty());
        EXPECT_EQ(resumed.steps.front(), 5) << "not a resume of step 4";
        EXPECT_EQ(resumed.result.global_step, 12);
        EXPECT_EQ(max_diff(resumed.params, whole.params), 0.0)
            << "written at stage " << written << ", resumed at stage " << stage
            << (adamw ? " adamw" : " sgd");
        EXPECT_EQ(resumed.result.optimizer_fingerprint, whole.result.optimizer_fingerprint)
            << "stage " << stage;
      }
      std::filesystem::remove_all(dir);
    }
}

// Reshard (Note [Resume at another world size]): a stage-1 (and a stage-3) checkpoint written at
// world 2 resumes at world 4 and at world 1, at stages 1, 3 and 0, with the optimizer state
// equal to the gathered original (fingerprints of the full state), and trains on from there.
TEST(Trainer, ZeroCheckpointsReshardToAnyWorldSize) {
  const std::string dir = testing_dist::temp_dir("trainer_reshard");
  for (int written : {1, 3}) {
    TrainerOptions o = quiet_fp32(8, 2);
    o.zero.stage = written;
    o.checkpoint.dir = dir + "/w" + std::to_string(written);
    o.loop.max_steps = 4;  // mid-epoch 1
    const Trained first = train_user_net(2, o, mse(), true, native, true);
    ASSERT_FALSE(first.result.last_checkpoint.empty());
    // Note [Optimizer shard files]: one file per rank's shard.
    const std::string ck = first.result.last_checkpoint;
    for (const char* f : {"/optimizer.shard0.pt", "/optimizer.shard1.pt", "/optimizer.shards.json"})
      EXPECT_TRUE(std::filesystem::exists(ck + f)) << f;
    EXPECT_FALSE(std::filesystem::exists(ck + "/optimizer.shard2.pt"));
    for (int world : {4, 1})
      for (int stage : {1, 3, 0}) {
        TrainerOptions r = quiet_fp32(8, 2);
        r.zero.stage = stage;
        r.checkpoint.resume_from = first.result.last_checkpoint;
        r.loop.max_steps = 4;  // nothing left: the state as loaded
        const Trained loaded = train_user_net(world, r, mse(), true, native, true);
        EXPECT_FALSE(loaded.result.nothing_to_train.empty());
        EXPECT_EQ(loaded.result.optimizer_fingerprint, first.result.optimizer_fingerprint)
            << "written at world 2 stage " << written << ", loaded at world " << world << " stage " << stage;
        EXPECT_EQ(max_diff(loaded.params, first.params), 0.0);
        r.loop.max_steps = 0;
        const Trained on = train_user_net(world, r, mse(), true, native, true);
        // 96 samples, batch 8: 4 steps of world 2 leave 32 of epoch 1 (world 4: 1 step; world 1:
        // 4), then epoch 2 (world 4: 3 steps; world 1: 12).
        EXPECT_EQ(on.result.global_step, world == 4 ? 4 + 1 + 3 : 4 + 4 + 12) << "world " << world;
      }
  }
  std::filesystem::remove_all(dir);
}

namespace {

// UserNet with a parameter that two of every three forwards use.
struct SometimesNet : UserNet {
  SometimesNet() { extra = register_parameter("extra", torch::ones({4})); }
  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor y = UserNet::forward(x);
    return calls++ % 3 != 2 ? y + extra : y;
  }
  at::Tensor extra;
  int64_t calls = 0;
};

}  // namespace

// A parameter that some micro-batches leave out, under accumulation (3 micro-batches a step,
// the third without it) and find_unused_parameters: stage 3 trains as stage 0. Its units' counts
// start afresh at every backward; before, a count left short by such a pass released a unit
// while the next backward still read it (a crash).
TEST(Trainer, ZeroStageThreeWithAParameterSomeMicroBatchesLeaveOut) {
  std::map<int, std::vector<at::Tensor>> params;
  for (int stage : {0, 3}) {
    TrainerOptions o = quiet_fp32(4, 1);
    o.loop.grad_accum_steps = 3;
    o.ddp.find_unused_parameters = true;
    o.zero.stage = stage;
    params[stage] = rank_zero_fit<SometimesNet>(2, o, [](SometimesNet& net) {
                      return make_optimizer(net, false);
                    }).params;
  }
  ASSERT_EQ(params[3].size(), params[0].size());
  EXPECT_LE(max_diff(params[0], params[3]), 1e-6);
  EXPECT_GT((params[0].back() - 1).abs().max().item<double>(), 1e-3) << "extra was not trained";
}

namespace {

// `extra` is used only in every other forward: a step in two (one micro-batch a step) where no
// rank uses it.
struct EveryOtherNet : UserNet {
  EveryOtherNet() { extra = register_parameter("extra", torch::ones({4})); }
  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor y = UserNet::forward(x);
    return calls++ % 2 == 0 ? y + extra : y;
  }
  at::Tensor extra;
  int64_t calls = 0;
};

std::unique_ptr<torch::optim::Optimizer> adamw_for_every_other(EveryOtherNet& net) {
  return make_optimizer(net, /*adamw=*/true);
}

// The first parameter fp32, the others fp64: buckets of two dtypes (fp64, not bf16: the Gloo
// of LibTorch 1.13 reduces no bf16).
struct MixedDtypeNet : torch::nn::Module {
  MixedDtypeNet() {
    scale = register_parameter("scale", torch::ones({4}));
    a = register_module("a", torch::nn::Linear(8, 4));
    a->to(torch::kDouble);
  }
  at::Tensor forward(const at::Tensor& x) { return a(x.to(torch::kDouble)).to(torch::kFloat) * scale; }
  at::Tensor scale;
  torch::nn::Linear a{nullptr};
};

}  // namespace

// find_unused_parameters at stages 2 and 3: a parameter no rank used in a step has no
// gradient, so AdamW skips it (moments and weight decay untouched), as at stage 0. Before, its
// shard slice of zeros was stepped as a gradient.
TEST(Trainer, ZeroStagesTwoAndThreeSkipAParameterNoRankUsed) {
  std::map<int, std::vector<at::Tensor>> params;
  for (int stage : {0, 2, 3}) {
    TrainerOptions o = quiet_fp32(8, 1);
    o.ddp.find_unused_parameters = true;
    o.zero.stage = stage;
    params[stage] = rank_zero_fit<EveryOtherNet>(2, o, adamw_for_every_other).params;
  }
  for (int stage : {2, 3}) {
    ASSERT_EQ(params[stage].size(), params[0].size());
    EXPECT_LE(max_diff(params[0], params[stage]), 1e-6) << "stage " << stage;
  }
}

// Each parameter keeps its own Adam step count in the shard files: under
// find_unused_parameters, EveryOtherNet's `extra` has stepped half as often as the others, and a
// resume from a stage-1, -2 or -3 checkpoint ends bitwise equal to the uninterrupted run. Before,
// the files held one count for all, and `extra` resumed with another bias correction.
TEST(Trainer, ZeroCheckpointsKeepEachParametersStepCount) {
  const std::string dir = testing_dist::temp_dir("trainer_zero_steps");
  auto train = [](const TrainerOptions& o) {
    return rank_zero_fit<EveryOtherNet>(2, o, adamw_for_every_other);
  };
  for (int stage : {1, 2, 3}) {
    TrainerOptions o = quiet_fp32(8, 2);
    o.optim.lr_schedule = LrSchedule::kEpochCosine;
    o.ddp.find_unused_parameters = true;
    o.zero.stage = stage;
    const auto whole = train(o);
    o.checkpoint.dir = dir;
    o.loop.max_steps = 4;  // an even step: the resumed net's forwards alternate as the whole run's
    const auto first = train(o);
    ASSERT_FALSE(first.result.last_checkpoint.empty());
    std::ifstream layout_file(first.result.last_checkpoint + "/optimizer.shards.json");
    const auto layout = nlohmann::json::parse(layout_file);
    std::vector<int64_t> steps;
    for (const auto& p : layout.at("params")) steps.push_back(p.at("step").get<int64_t>());
    // extra (used in two of the four steps) and the four parameters used in every step
    EXPECT_EQ(std::count(steps.begin(), steps.end(), 2), 1) << layout.at("params").dump();
    EXPECT_EQ(std::count(steps.begin(), steps.end(), 4), 4) << layout.at("params").dump();
    o.loop.max_steps = 0;
    o.checkpoint.resume_from = first.result.last_checkpoint;
    const auto resumed = train(o);
    EXPECT_EQ(resumed.result.global_step, 12);
    EXPECT_EQ(max_diff(resumed.params, whole.params), 0.0) << "stage " << stage;
    std::filesystem::remove_all(dir);
  }
}

// Stage 1 with an fp32 parameter first and fp64 ones after: the updated fp64 shards reach the
// other ranks in fp64 (they were gathered in the first parameter's dtype, fp32, so each rank
// held its own pieces exact and the others' rounded: replicas that differ).
TEST(Trainer, ZeroStageOneGathersEachBucketInItsOwnDtype) {
  std::map<int, std::vector<at::Tensor>> by_rank;
  TrainerOptions o = quiet_fp32(8, 1);
  o.zero.stage = 1;
  o.loop.max_steps = 3;
  fit_fresh_net<MixedDtypeNet>(
      2, o,
      [](MixedDtypeNet& net) {
        return std::make_unique<torch::optim::SGD>(net.parameters(), torch::optim::SGDOptions(0.1));
      },
      [&](const DistContext& ctx, MixedDtypeNet& net, const TrainResult&) {
        for (const auto& p : net.parameters()) by_rank[ctx.rank()].push_back(p.detach().to(torch::kDouble));
      });
  ASSERT_EQ(by_rank.size(), 2u);
  EXPECT_EQ(max_diff(by_rank[0], by_rank[1]), 0.0) << "the replicas differ";
}

// A ZeRO checkpoint of a model with parameters of two dtypes resumes bitwise: its shard files
// hold every bucket's rows in the widest dtype (at::cat promotes), and each parameter's state
// comes back in its own. Before, the fp32 parameter's momentum came back fp64, and the resumed
// run parted from the uninterrupted one.
TEST(Trainer, AZeroCheckpointOfTwoDtypesResumesBitwise) {
  const std::string dir = testing_dist::temp_dir("trainer_zero_two_dtypes");
  const auto sgd = [](MixedDtypeNet& net) {
    return std::make_unique<torch::optim::SGD>(net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  };
  TrainerOptions o = quiet_fp32(8, 1);
  o.zero.stage = 1;
  o.checkpoint.dir = dir + "/whole";
  const NetFit whole = rank_zero_fit<MixedDtypeNet>(2, o, sgd);
  o.checkpoint.dir = dir + "/parts";
  o.loop.max_steps = 3;
  const NetFit first = rank_zero_fit<MixedDtypeNet>(2, o, sgd);
  ASSERT_FALSE(first.result.last_checkpoint.empty());
  o.loop.max_steps = 0;
  o.checkpoint.resume_from = first.result.last_checkpoint;
  const NetFit resumed = rank_zero_fit<MixedDtypeNet>(2, o, sgd);
  EXPECT_EQ(resumed.result.global_step, whole.result.global_step);
  ASSERT_EQ(resumed.params.size(), whole.params.size());
  for (size_t i = 0; i < whole.params.size(); ++i)
    EXPECT_TRUE(at::equal(resumed.params[i], whole.params[i])) << "parameter " << i;
  EXPECT_EQ(resumed.result.optimizer_fingerprint, whole.result.optimizer_fingerprint);
  std::filesystem::remove_all(dir);
}

// Stages 2 and 3 keep each rank's shard of one reduction per step: accumulation that reduces
// every micro-batch (accum_no_sync off) is refused, naming the three options (before, all but
// the last micro-batch's gradient was lost).
TEST(Trainer, ZeroStagesTwoAndThreeRefuseAReductionPerMicroBatch) {
  TrainerOptions o = quiet_fp32(8, 1);
  o.loop.grad_accum_steps = 2;
  o.ddp.accum_no_sync = false;
  for (int stage : {1, 2, 3}) {
    o.zero.stage = stage;
    if (stage == 1) {
      EXPECT_NO_THROW(o.validate());
      continue;
    }
    try {
      o.validate();
      ADD_FAILURE() << "stage " << stage << " took accum_no_sync off";
    } catch (const OptionError& e) {
      const std::string what = e.what();
      for (const char* name : {"zero.stage", "ddp.accum_no_sync", "loop.grad_accum_steps"})
        EXPECT_NE(what.find(name), std::string::npos) << what;
    }
  }
}

// The refusal holds for the accumulation keep_global_batch chooses on a resume too: a ZeRO
// stage 2 run without no_sync accumulation, trained at world 2, resumed at world 1 keeping its
// global batch (2 micro-batches a step) is refused, not trained on half its gradient.
TEST(Trainer, KeepGlobalBatchCannotLeadStageTwoToReduceEveryMicroBatch) {
  const std::string dir = testing_dist::temp_dir("zero_keep_global_batch");
  TrainerOptions o = quiet_fp32(8, 1);
  o.zero.stage = 2;
  o.ddp.accum_no_sync = false;
  o.checkpoint.dir = dir;
  o.loop.max_steps = 2;
  ASSERT_EQ(train_user_net(2, o).result.global_step, 2);
  o.checkpoint.resume_from = "auto";
  o.loop.keep_global_batch = true;
  o.loop.max_steps = 4;
  try {
    train_user_net(1, o);
    ADD_FAILURE() << "a resume that reduces every micro-batch under stage 2 trained";
  } catch (const OptionError& e) {
    EXPECT_NE(std::string(e.what()).find("accum_no_sync"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// Clipping takes the norm of the gradients the optimizer steps, at every stage: here an
// optimizer of `b` alone, while `a` still requires gradients. Stage 0 took the norm over the
// whole module (a's gradients, never reset, grew into it and shrank b's steps), stage 2 over
// the optimizer's shards: the two trained differently on the same options.
TEST(Trainer, ClippingTakesTheNormOfWhatTheOptimizerSteps) {
  std::map<int, std::vector<at::Tensor>> params;
  for (int stage : {0, 2}) {
    TrainerOptions o = quiet_fp32(8, 1);
    o.optim.clip_grad_norm = 0.05;
    o.zero.stage = stage;
    params[stage] = rank_zero_fit<UserNet>(2, o, [](UserNet& net) {
                      return std::make_unique<torch::optim::SGD>(net.b->parameters(),
                                                                 torch::optim::SGDOptions(0.1).momentum(0.9));
                    }).params;
  }
  ASSERT_EQ(params[0].size(), params[2].size());
  EXPECT_LE(max_diff(params[0], params[2]), 1e-6);
  const std::shared_ptr<UserNet> fresh = make_net();
  EXPECT_EQ(fresh->a->weight.sub(params[0][0]).abs().max().item<double>(), 0.0) << "a is not optimized";
  EXPECT_GT(fresh->b->weight.sub(params[0][2]).abs().max().item<double>(), 0.0) << "b was not trained";
}

// A library user's module sharded as it is built (ShardAsBuilt, public: ddp/shard_as_built.h;
// its Fill gives each unit its initial weights) trains at stage 3 as the same module built
// whole and sharded by the Trainer: a rank never holds every unit at once.
TEST(Trainer, AModuleShardedAsBuiltTrainsAsOneBuiltWhole) {
  TrainerOptions o = quiet_fp32(8, 1);
  o.zero.stage = 3;
  const Trained whole = train_user_net(2, o);
  std::vector<at::Tensor> params;
  size_t sharded = 0;
  std::mutex mu;
  testing_dist::run_world(2, [&](const DistContext& ctx) {
    const std::shared_ptr<UserNet> initial = make_net();  // the weights the whole build starts from
    // Every rank's draws from the shared generator (make_net seeds and draws under its lock) end
    // before any rank's build below draws from it too: else a rank's initial weights were now
    // and then another's (seen once in six runs on LibTorch 2.11).
    ctx.barrier("the test's initial weights drawn");
    ShardAsBuilt sink(ctx, [&](const std::string& name, torch::nn::Module& unit) {
      torch::NoGradGuard no_grad;
      const auto from = initial->named_children()[name]->parameters();
      const auto to = unit.parameters();
      for (size_t i = 0; i < to.size(); ++i) to[i].copy_(from[i]);
    });
    const auto net = std::make_shared<UserNet>(UserNetShape{false, UnitBackward::kReadsParameters, 16,
                                                            &sink});  // draws in both threads at once: filled
    {
      torch::NoGradGuard no_grad;
      net->b->weight.copy_(initial->b->weight);
      net->b->bias.copy_(initial->b->bias);
    }
    EXPECT_EQ(net->a->weight.storage().data_ptr().get(), nullptr) << "unit a still holds its whole weight";
    const auto optimizer = make_optimizer(*net, /*adamw=*/false);
    Trainer trainer(ctx, trainable(net), *optimizer, o);
    UserData train(96, false), test(40, false);
    trainer.fit(train, &test);
    std::lock_guard<std::mutex> lock(mu);
    sharded += sink.units_sharded();
    if (ctx.rank() == 0)
      for (const auto& p : net->parameters()) params.push_back(p.detach().clone());
  });
  EXPECT_EQ(sharded, 2u) << "each rank sharded unit a as it was built";
  ASSERT_EQ(params.size(), whole.params.size());
  EXPECT_LE(max_diff(params, whole.params), 1e-6);
}
