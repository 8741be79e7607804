// The Trainer as a library user calls it: a module, a dataset and a loss of the user's own,
// ranks as threads of this process over real Gloo (#13: world 2 equals world 1 with the
// doubled batch; a user's loss; callbacks; bad options; init_from and keep_global_batch).
// Resume: test_trainer_resume.cpp; stop: test_trainer_stop.cpp; ZeRO: test_trainer_zero.cpp.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>

#include <torch/nn/modules/batchnorm.h>
#include <nlohmann/json.hpp>

#include "train/evaluate.h"
#include "trainer_fixtures.h"

using namespace ddptrain;
using namespace ddptrain::trainer_test;

TEST(Trainer, UserModuleAtWorldTwoEqualsWorldOneWithTheDoubledBatch) {
  for (int accum : {1, 2}) {
    TrainerOptions one = quiet_fp32(16 / accum, 2), two = quiet_fp32(8 / accum, 2);
    one.loop.grad_accum_steps = two.loop.grad_accum_steps = accum;
    const Trained w1 = train_user_net(1, one), w2 = train_user_net(2, two);
    ASSERT_EQ(w1.params.size(), 4u);
    EXPECT_EQ(w1.result.global_step, 12);  // 96 samples / 16 per step, 2 epochs
    EXPECT_EQ(w2.result.global_step, 12);
    const Trained start = train_user_net(1, quiet_fp32(16, 0));  // no epoch: the initial weights
    EXPECT_GT(max_diff(w1.params, start.params), 1e-3) << "training changed nothing";
    EXPECT_LE(max_diff(w1.params, w2.params), 1e-6) << "grad_accum_steps " << accum;
  }
}

// The fit check is the Trainer's (#29 item 4): a module whose output does not fit the loss is
// a UsageError on every rank before anything is trained, naming the shapes and the cause,
// instead of LibTorch's error from inside the first step.
TEST(Trainer, AnOutputThatDoesNotFitTheLossIsAUsageErrorOnEveryRank) {
  std::mutex mu;
  std::vector<std::string> messages;
  testing_dist::run_world(2, [&](const DistContext& ctx) {
    Trainable model = native(make_net());
    const auto optimizer = make_optimizer(*model.module, false);
    UserData train(96, /*regression=*/false);  // class labels (B) for a mean squared error of (B, 4)
    Trainer trainer(ctx, std::move(model), *optimizer, quiet_fp32(8, 1), mse());
    auto recorder = std::make_shared<Recorder>();
    trainer.add_callback(recorder);
    try {
      trainer.fit(train, nullptr);
    } catch (const UsageError& e) {
      std::lock_guard<std::mutex> lock(mu);
      messages.push_back(e.what());
    }
    EXPECT_TRUE(recorder->losses.empty()) << "rank " << ctx.rank() << " trained a micro-batch";
  });
  ASSERT_EQ(messages.size(), 2u) << "not every rank refused the module";
  for (const std::string& m : messages) {
    EXPECT_NE(
        m.find("'s output (2, 4) Float does not fit the objective's loss with targets (2) Long from the "
               "training data: "),
        std::string::npos)
        << m;
    EXPECT_EQ(m, messages[0]) << "the ranks disagree";
  }
}

// A frozen backbone kept in eval mode (the usual fine-tuning): its BatchNorm's statistics must
// not change. Note [Each module keeps its mode]: training and evaluation keep its mode. Before,
// the Trainer's train() at each epoch and after each evaluation set it back into training mode:
// it normalised with batch statistics and updated its running ones.
struct FrozenNormNet : torch::nn::Module {
  FrozenNormNet() {
    norm = register_module("norm", torch::nn::BatchNorm1d(8));
    head = register_module("head", torch::nn::Linear(8, 4));
    norm->eval();
    for (auto& p : norm->parameters()) p.requires_grad_(false);
  }
  at::Tensor forward(const at::Tensor& x) { return head(norm(x)); }
  torch::nn::BatchNorm1d norm{nullptr};
  torch::nn::Linear head{nullptr};
};

TEST(Trainer, ASubmoduleInEvalModeStaysSoThroughTrainingAndEvaluation) {
  TrainerOptions o = quiet_fp32(8, 2);
  o.loop.eval_every = 1;
  std::mutex mu;
  testing_dist::run_world(2, [&](const DistContext& ctx) {
    std::shared_ptr<FrozenNormNet> net;
    {
      std::lock_guard<std::mutex> lock(mu);
      torch::manual_seed(5);
      net = std::make_shared<FrozenNormNet>();
    }
    const at::Tensor mean = net->norm->running_mean.clone(), var = net->norm->running_var.clone();
    torch::optim::SGD optimizer(net->head->parameters(), torch::optim::SGDOptions(0.1));
    UserData train(96, /*regression=*/false), test(40, /*regression=*/false);
    Trainer trainer(ctx, trainable(net), optimizer, o);
    const TrainResult r = trainer.fit(train, &test);
    const bool norm_training = net->norm->is_training(),
               rest_training = net->is_training() && net->head->is_training();
    // evaluate() on its own leaves each module in its mode too (a collective: outside the lock).
    net->eval();
    evaluate(trainable(net), Objective::classification(), test, {}, ctx);
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(r.evaluated);
    EXPECT_FALSE(norm_training) << "rank " << ctx.rank();
    EXPECT_TRUE(rest_training) << "rank " << ctx.rank();
    EXPECT_TRUE(net->norm->running_mean.equal(mean)) << "rank " << ctx.rank();
    EXPECT_TRUE(net->norm->running_var.equal(var)) << "rank " << ctx.rank();
    EXPECT_FALSE(net->is_training()) << "evaluate() put an eval-mode model into training mode";
  });
}

// A parameter frozen when the Trainer was built and unfrozen later (a callback at an epoch's
// end) is not one DDP reduces: each rank would step it with its own gradient. The next epoch
// stops with a UsageError naming it, on every rank.
struct Unfreeze : Callback {
  explicit Unfreeze(at::Tensor p) : param(std::move(p)) {}
  void on_epoch_end(const TrainState&, const EpochEvent&) override { param.requires_grad_(true); }
  at::Tensor param;
};

TEST(Trainer, AParameterUnfrozenDuringTheRunIsAUsageError) {
  TrainerOptions o = quiet_fp32(8, 2);
  std::mutex mu;
  std::vector<std::string> errors;
  testing_dist::run_world(2, [&](const DistContext& ctx) {
    std::shared_ptr<FrozenNormNet> net;
    {
      std::lock_guard<std::mutex> lock(mu);
      torch::manual_seed(5);
      net = std::make_shared<FrozenNormNet>();
    }
    torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.1));
    UserData train(96, /*regression=*/false);
    Trainer trainer(ctx, trainable(net), optimizer, o);
    trainer.add_callback(std::make_shared<Unfreeze>(net->norm->weight));
    try {
      trainer.fit(train, nullptr);
    } catch (const UsageError& e) {
      std::lock_guard<std::mutex> lock(mu);
      errors.push_back(e.what());
    }
  });
  ASSERT_EQ(errors.size(), 2u);
  for (const std::string& e : errors)
    EXPECT_NE(e.find("parameter 'norm.weight' was frozen (requires_grad false) when"), std::string::npos)
        << e;
}

TEST(Trainer, AUserLossCallbacksAndEvaluationWithoutAccuracy) {
  TrainerOptions o = quiet_fp32(8, 2);
  o.loop.eval_every = 1;
  const Trained r = train_user_net(2, o, mse(), /*regression=*/true);
  EXPECT_EQ(r.steps.size(), 12u);
  EXPECT_EQ(r.steps.front(), 1);
  EXPECT_EQ(r.steps.back(), 12);
  EXPECT_TRUE(r.result.evaluated);
  EXPECT_EQ(r.result.test_accuracy, -1.0) << "an objective without `correct` reports no accuracy";
  EXPECT_GT(r.result.test_loss, 0.0);
  EXPECT_LT(r.result.train_loss, 10.0);
}

// Evaluation over 33 samples, in batches of 8, at worlds 1, 2 and 4: the ranks whose share is
// one short evaluate a sample more (so every rank runs as many forwards) that counts nowhere:
// the loss and accuracy are the world-1 values, over 33 samples.
TEST(Trainer, EvaluationCountsEachTestSampleOnceWhenTheRanksShareItUnevenly) {
  std::map<int, EvalResult> by_world;
  std::mutex mu;
  for (int world : {1, 2, 4})
    testing_dist::run_world(world, [&](const DistContext& ctx) {
      const Trainable model = native(make_net());
      const EvalResult r = evaluate(model, Objective::classification(), UserData(33, false), {8, 0, {}}, ctx);
      std::lock_guard<std::mutex> lock(mu);
      if (ctx.rank() == 0) by_world[world] = r;
    });
  for (int world : {1, 2, 4}) {
    EXPECT_EQ(by_world[world].samples, 33) << "world " << world;
    EXPECT_NEAR(by_world[world].loss, by_world[1].loss, 1e-6) << "world " << world;
    EXPECT_EQ(by_world[world].accuracy, by_world[1].accuracy) << "world " << world;
  }
  EXPECT_GT(by_world[1].loss, 0.0);
  // evaluate() is public: options that would hang its loader are refused by name.
  testing_dist::run_world(1, [&](const DistContext& ctx) {
    const Trainable model = native(make_net());
    for (const auto& [o, field] : {std::pair{EvalOptions{0, 0, {}}, "EvalOptions::batch_size=0"},
                                   std::pair{EvalOptions{8, -2, {}}, "EvalOptions::num_workers=-2"}}) {
      try {
        evaluate(model, Objective::classification(), UserData(33, false), o, ctx);
        ADD_FAILURE() << field << " was taken";
      } catch (const OptionError& e) {
        EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
      }
    }
  });
}

// A TorchScript module loaded in C++ trains through ScriptModel as the native module does,
// from memory and from its saved file.
TEST(Trainer, AScriptModuleTrainsAsTheNativeModule) {
  const std::string dir = testing_dist::temp_dir("trainer_script");
  std::filesystem::create_directories(dir);
  std::mutex mu;  // the ranks are threads: the file is written once
  auto from_memory = [&](const std::shared_ptr<UserNet>& net) {
    auto model = std::make_shared<ScriptModel>(scripted(*net), "user_net");
    std::lock_guard<std::mutex> lock(mu);
    if (!std::filesystem::exists(dir + "/user_net.pt")) scripted(*net).save(dir + "/user_net.pt");
    return trainable(model);
  };
  auto from_file = [&](const std::shared_ptr<UserNet>&) {
    return trainable(std::make_shared<ScriptModel>(dir + "/user_net.pt"));
  };
  TrainerOptions o = quiet_fp32(8, 2);
  const Trained ours = train_user_net(2, o, mse(), true),
                script = train_user_net(2, o, mse(), true, from_memory);
  ASSERT_EQ(script.params.size(), 4u);
  EXPECT_EQ(script.result.global_step, 12);
  EXPECT_LE(max_diff(ours.params, script.params), 1e-6);
  std::printf("scripted vs native after 12 steps at world 2: max |diff| %g\n",
              max_diff(ours.params, script.params));
  const Trained loaded = train_user_net(2, o, mse(), true, from_file);
  EXPECT_EQ(max_diff(loaded.params, script.params), 0.0) << "the saved file trains as the module in memory";
  const Trained start = train_user_net(1, quiet_fp32(8, 0), mse(), true, from_file);
  EXPECT_GT(max_diff(start.params, script.params), 1e-3) << "training changed nothing";
  // A ScriptModel given its FLOPs brings them (MFU) and its description; was 0 without them.
  const Trainable with_flops = trainable(std::make_shared<ScriptModel>(dir + "/user_net.pt", 1234));
  EXPECT_EQ(with_flops.flops_per_sample, 1234);
  EXPECT_NE(with_flops.description.find("user_net.pt"), std::string::npos) << with_flops.description;
  std::filesystem::remove_all(dir);
}

// A library user's bad options are clear errors naming the field, its value and the fix in
// the library's words, before any collective (Note [Options named by their field]).
TEST(Trainer, BadOptionsNameTheField) {
  for (auto [set, field] : std::vector<std::pair<std::function<void(TrainerOptions&)>, std::string>>{
           {[](TrainerOptions& o) { o.data.batch_size = 0; },
            "TrainerOptions::data.batch_size=0 must be > 0; pass the per-rank batch size, e.g. "
            "TrainerOptions::data.batch_size = 64"},
           {[](TrainerOptions& o) { o.loop.grad_accum_steps = 0; },
            "TrainerOptions::loop.grad_accum_steps=0"},
           {[](TrainerOptions& o) { o.report.log_interval = 0; }, "TrainerOptions::report.log_interval=0"},
           {[](TrainerOptions& o) { o.optim.min_lr_ratio = 2; }, "TrainerOptions::optim.min_lr_ratio=2"},
           {[](TrainerOptions& o) { o.zero.stage = 4; }, "TrainerOptions::zero.stage=4 is not available"},
           {[](TrainerOptions& o) {
              o.zero.stage = 2;
              o.ddp.comm_hook = CommHook::kFp16;
            },
            "does not combine with TrainerOptions::ddp.comm_hook or "
            "TrainerOptions::ddp.gradient_as_bucket_view"},
           {[](TrainerOptions& o) {
              o.optim.lr_schedule = LrSchedule::kAuto;  // SGD: epoch_cosine, which has no warmup
              o.optim.warmup_steps = 5;
            },
            "TrainerOptions::optim.warmup_steps=5 needs the per-step schedule; pass "
            "TrainerOptions::optim.lr_schedule = step_cosine"},
           {[](TrainerOptions& o) { o.report.enable_profiling = true; },
            "TrainerOptions::report.enable_profiling writes its trace to TrainerOptions::checkpoint.dir"}}) {
    TrainerOptions o = quiet_fp32(8, 1);
    set(o);
    try {
      train_user_net(1, o);
      ADD_FAILURE() << "no error for " << field;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  }
  // At fit: a batch larger than a rank's share of the data: the field, in the library's words.
  try {
    train_user_net(1, quiet_fp32(128, 1));
    ADD_FAILURE() << "trained without a full batch";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "an epoch has no full batch per rank (96 samples, TrainerOptions::data.batch_size=128); lower "
              "TrainerOptions::data.batch_size or add data");
  }
}

// The CLI's --init_from and --keep_global_batch are the library's (#29 item 4):
// checkpoint.init_from starts from a checkpoint's model.pt, and loop.keep_global_batch keeps a
// checkpoint's global batch at another world size, or names the fields where it cannot.
TEST(Trainer, InitFromAndKeepGlobalBatchAreOptions) {
  const std::string dir = testing_dist::temp_dir("trainer_powers");
  TrainerOptions o = quiet_fp32(4, 1);
  o.loop.grad_accum_steps = 2;  // world 2: global batch 16, 6 steps per epoch of 96 samples
  o.checkpoint.dir = dir;
  o.loop.max_steps = 3;  // stops and saves halfway through the epoch
  const Trained first = train_user_net(2, o);
  ASSERT_FALSE(first.result.last_checkpoint.empty());
  TrainerOptions init = quiet_fp32(4, 0);
  init.checkpoint.init_from = first.result.last_checkpoint + "/model.pt";
  EXPECT_EQ(max_diff(train_user_net(1, init).params, first.params), 0.0) << "init_from was not loaded";
  TrainerOptions resumed = o;
  resumed.checkpoint.dir = "";
  resumed.checkpoint.resume_from = first.result.last_checkpoint;
  resumed.loop.max_steps = 0;
  // World 4 at accumulation 2 doubles the global batch: the 48 samples left are 2 steps (one
  // partial); keeping 16 takes accumulation 1: 3 steps.
  EXPECT_EQ(train_user_net(4, resumed).result.global_step, 3 + 2);
  resumed.loop.keep_global_batch = true;
  EXPECT_EQ(train_user_net(4, resumed).result.global_step, 3 + 3);
  try {
    train_user_net(3, resumed);
    ADD_FAILURE() << "16 is not a multiple of 4 x 3, yet world 3 kept it";
  } catch (const UsageError& e) {
    EXPECT_NE(
        std::string(e.what()).find("TrainerOptions::loop.keep_global_batch: the checkpoint's global batch "
                                   "16 is not a multiple of TrainerOptions::data.batch_size 4 x world 3"),
        std::string::npos)
        << e.what();
  }
  // A leftover accumulation that the kept global batch replaces (at world 2: 2): the claim's
  // check of where the checkpoint stopped (24 samples per rank) took groups of 4 x 4 and refused
  // it, naming the batch size.
  resumed.loop.grad_accum_steps = 4;
  EXPECT_EQ(train_user_net(2, resumed).result.global_step, 3 + 3);
  std::filesystem::remove_all(dir);
}

// A step record's grad_mib counts each byte of gradient memory once: under
// gradient_as_bucket_view the gradients are views into the buckets, so it is the buckets alone
// (it counted them twice: the flag's saving did not show), half of what the gradients and their
// buckets hold without the flag.
TEST(Trainer, GradientMemoryCountsBucketViewsOnce) {
  const std::string dir = testing_dist::temp_dir("trainer_grad_mib");
  std::filesystem::create_directories(dir);
  const auto grad_mib = [&](bool as_view) {
    TrainerOptions o = quiet_fp32(8, 1);
    o.loop.max_steps = 4;
    o.report.log_interval = 2;
    o.report.metrics_file = dir + (as_view ? "/view.jsonl" : "/copy.jsonl");
    o.ddp.gradient_as_bucket_view = as_view;
    train_user_net(2, o);
    double last = -1;
    std::ifstream in(o.report.metrics_file);
    for (std::string line; std::getline(in, line);) {
      const auto r = nlohmann::json::parse(line);
      if (r.value("kind", "") == "step") last = r.at("grad_mib").get<double>();
    }
    return last;
  };
  const double copied = grad_mib(false), viewed = grad_mib(true);
  EXPECT_GT(viewed, 0.0);
  EXPECT_NEAR(viewed, 0.5 * copied, 1e-9) << "with the flag " << viewed << " MiB, without " << copied;
  std::filesystem::remove_all(dir);
}

// The run's samples/s counts the samples it trained: an epoch's last step that accumulates
// fewer micro-batches (6 per rank, 4 a step), or a last micro-batch that is short (drop_last
// off: 48 per rank in batches of 10), is not counted as a whole one (it was 2 x 64 = 128 where
// 96 were trained). Here: samples/s times the epochs' training seconds is the 96 trained.
TEST(Trainer, SamplesPerSecondCountsTheSamplesTrained) {
  const std::string dir = testing_dist::temp_dir("trainer_samples_per_s");
  std::filesystem::create_directories(dir);
  for (const bool short_batch : {false, true}) {
    TrainerOptions o = quiet_fp32(short_batch ? 10 : 8, 1);
    o.loop.grad_accum_steps = short_batch ? 1 : 4;
    o.data.drop_last = !short_batch;
    o.report.metrics_file = dir + (short_batch ? "/short.jsonl" : "/accum.jsonl");
    const Trained t = train_user_net(2, o);
    double epoch_s = 0;
    std::ifstream in(o.report.metrics_file);
    for (std::string line; std::getline(in, line);) {
      const auto r = nlohmann::json::parse(line);
      if (r.value("kind", "") == "epoch") epoch_s += r.at("epoch_s").get<double>();
    }
    EXPECT_NEAR(t.result.samples_per_s * epoch_s, 96.0, 1e-6) << "short batch: " << short_batch;
  }
  std::filesystem::remove_all(dir);
}
