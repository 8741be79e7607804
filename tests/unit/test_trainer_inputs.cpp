// What the Trainer checks of its inputs and the reports it is asked for: ranks that hold
// different data stop together before training (Note [Every rank holds the same data]); the
// profiler traces the steps it is given.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/evaluate.h"
#include "train/same_data.h"
#include "trainer_fixtures.h"

using namespace ddptrain;
using namespace ddptrain::trainer_test;

// Note [Every rank holds the same data]: rank 1's copy of the training data is 8 samples
// short (a sync still running) and, in a second fit, its test split is missing. Every rank
// stops before it trains, with the same usage error naming rank 1 and both sizes. Before,
// each rank drew its own order over its own size (samples trained twice or never) and, where
// the step counts differed, hung at the next collective. In a third fit rank 1's copy has as
// many samples from other files (Dataset::files_hash: a shard replaced on its node): refused
// as well (before, the same indices named other samples on each rank).
TEST(Trainer, RanksHoldingDifferentDataStopTogether) {
  struct FilesOf : UserData {
    FilesOf(int64_t n, uint64_t files) : UserData(n, false), files(files) {}
    uint64_t files_hash() const override { return files; }
    uint64_t files;
  };
  for (const int variant : {0, 1, 2}) {
    const bool test_missing = variant == 1, other_files = variant == 2;
    std::vector<std::string> errors(2);
    std::vector<int> usage(2, 0);
    testing_dist::run_world(2, [&](const DistContext& ctx) {
      Trainable model = native(make_net());
      const auto optimizer = make_optimizer(*model.module, false);
      try {
        Trainer trainer(ctx, std::move(model), *optimizer, quiet_fp32(8, 1));
        FilesOf train(ctx.rank() == 1 && variant == 0 ? 88 : 96, ctx.rank() == 1 && other_files ? 2 : 1);
        UserData test(32, false);
        trainer.fit(train, ctx.rank() == 1 && test_missing ? nullptr : &test);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(ctx.rank())] = e.what();
        usage[static_cast<size_t>(ctx.rank())] = dynamic_cast<const UsageError*>(&e) != nullptr;
      }
    });
    const std::string want = test_missing ? "the ranks hold different test data: rank 0: 32 samples"
                                          : "the ranks hold different training data: rank 0: 96 samples";
    const std::string rank1 = test_missing  ? "rank 1: no such split"
                              : other_files ? "classes, files 0000000000000002"
                                            : "rank 1: 88 samples";
    for (int r = 0; r < 2; ++r) {
      EXPECT_TRUE(usage[r]) << "rank " << r << ": " << errors[r];
      EXPECT_NE(errors[r].find(want), std::string::npos) << errors[r];
      EXPECT_NE(errors[r].find(rank1), std::string::npos) << errors[r];
    }
  }
}

// Note [Every rank holds the same data]: a rank that cannot open its data (a file missing on its
// node) stops with its own error, and the others stop with it, naming how many could not,
// instead of waiting in the gather of the sizes until the timeout.
TEST(Trainer, ARankThatCannotOpenItsDataStopsTheOthersToo) {
  std::vector<std::string> errors(3);
  testing_dist::run_world(3, [&](const DistContext& ctx) {
    try {
      open_data_on_every_rank(ctx, [&] {
        if (ctx.rank() == 2) throw UsageError("'/data/train.bin' does not exist here");
        DataSplits d;
        d.train = std::make_unique<UserData>(96, false);
        return d;
      });
    } catch (const UsageError& e) {
      errors[static_cast<size_t>(ctx.rank())] = e.what();
    }
  });
  EXPECT_EQ(errors[2], "'/data/train.bin' does not exist here");
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(errors[r].find("1 rank could not open the data"), std::string::npos) << errors[r];
}

// A rank that cannot open its own report (here its sample trace file, a folder of that name on
// its node) stops the others with it as the run starts, naming how many could not; before, rank
// 0 went on into the start's next collective and waited there for the failure to reach it.
TEST(Trainer, ARankThatCannotOpenItsReportsStopsTheOthersToo) {
  const std::string dir = testing_dist::temp_dir("trainer_trace_rank1");
  std::filesystem::create_directories(dir + "/rank1.txt");
  std::vector<std::string> errors(2);
  testing_dist::run_world(2, [&](const DistContext& ctx) {
    Trainable model = native(make_net());
    const auto optimizer = make_optimizer(*model.module, false);
    TrainerOptions o = quiet_fp32(8, 1);
    o.report.trace_samples_dir = dir;
    try {
      Trainer trainer(ctx, std::move(model), *optimizer, o);
      UserData train(96, false);
      trainer.fit(train, nullptr);
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(ctx.rank())] = e.what();
    }
  });
  EXPECT_NE(errors[1].find("cannot open the sample trace file '" + dir + "/rank1.txt'"), std::string::npos)
      << errors[1];
  EXPECT_NE(errors[0].find("1 rank could not open the run's reports"), std::string::npos) << errors[0];
  std::filesystem::remove_all(dir);
}

// --profile_first_step N --profile_steps K (counted from 1): the Chrome trace holds the run's
// steps N-1 .. N+K-2 counted from 0, each with its phases. A window the run's end (max_steps)
// or an epoch's end (12 steps an epoch here) cuts short is written as far as it got.
TEST(Trainer, AProfileTracesTheStepsItIsGiven) {
  struct Case {
    int first, count, max_steps;
    std::set<int64_t> steps;
  } cases[] = {
      {4, 2, 7, {3, 4}}, {3, 3, 7, {2, 3, 4}}, {6, 3, 6, {5}}, {11, 4, 20, {10, 11}}, {13, 2, 20, {12, 13}}};
  for (const Case& c : cases) {
    const std::string dir = testing_dist::temp_dir("trainer_profile_window");
    TrainerOptions o = quiet_fp32(8, 2);
    o.checkpoint.dir = dir;
    o.loop.max_steps = c.max_steps;
    o.report.enable_profiling = true;
    o.report.profile_first_step = c.first;
    o.report.profile_steps = c.count;
    ASSERT_EQ(train_user_net(1, o).result.global_step, c.max_steps);
    std::ifstream in(dir + "/trace_rank0.json");
    ASSERT_TRUE(in.good()) << "no trace for --profile_first_step " << c.first;
    const auto trace = nlohmann::json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
    std::set<int64_t> steps;
    int forwards = 0;
    for (const auto& e : trace.at("traceEvents")) {
      if (e.at("ph") != "X") continue;
      steps.insert(e.at("args").at("step").get<int64_t>());
      forwards += e.at("name") == "fwd";
    }
    EXPECT_EQ(steps, c.steps) << "--profile_first_step " << c.first << " --profile_steps " << c.count;
    EXPECT_EQ(forwards, static_cast<int>(c.steps.size()));
    std::filesystem::remove_all(dir);
  }
  TrainerOptions o = quiet_fp32(8, 1);
  o.checkpoint.dir = "unused";
  o.report.enable_profiling = true;
  o.report.profile_first_step = 1;
  try {
    o.validate();
    ADD_FAILURE() << "profile_first_step 1 accepted";
  } catch (const OptionError& e) {
    EXPECT_NE(std::string(e.what()).find("report.profile_first_step=1: the first profiled step must be 2"),
              std::string::npos)
        << e.what();
  }
}

// A target of -100 (PyTorch's ignore_index, as Hugging Face masks labels): the eager loss
// skipped it while the evaluation's mean counted it, the fused CPU loss stopped on it and the
// CUDA one asserted. Refused by name on the host, in training and in evaluate(), before the
// batch goes to the device.
TEST(Trainer, ATargetOfIgnoreIndexIsRefusedByName) {
  struct Masked : UserData {
    Masked() : UserData(96, false) {}
    Example get(int64_t i) const override {
      Example e = UserData::get(i);
      if (i == 41) e.target = at::tensor(-100, at::kLong).reshape({});
      return e;
    }
  };
  testing_dist::run_world(1, [&](const DistContext& ctx) {
    const auto net = make_net();
    const auto optimizer = make_optimizer(*net, /*adamw=*/false);
    Trainer trainer(ctx, trainable(net), *optimizer, quiet_fp32(8, 1));
    Masked data;
    try {
      trainer.fit(data, nullptr);
      ADD_FAILURE() << "trained on a target of -100";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("a target of -100 (PyTorch's ignore_index)"), std::string::npos)
          << e.what();
    }
    try {
      evaluate(trainable(net), Objective::classification(), data, {8, 0, {}}, ctx);
      ADD_FAILURE() << "evaluated a target of -100";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("a target of -100"), std::string::npos) << e.what();
    }
  });
}

// Padded targets: Objective::classification_ignoring(-100) leaves them out of the loss, the
// accuracy and both counts (Objective::count). A third of the samples are -100; with a learning
// rate of 0 the weights never move, so the epoch's training loss and accuracy at world 2 are
// those of one forward over the whole training set, and the evaluation's those over the test
// set: PyTorch's cross_entropy(ignore_index=-100) and the hits among the counted targets.
// Before, the epoch's and the evaluation's means weighed every batch by all its targets and
// divided the hits by all of them (a third low).
TEST(Trainer, TargetsAnObjectiveIgnoresCountNowhere) {
  struct Padded : UserData {
    explicit Padded(int64_t n) : UserData(n, false) {}
    Example get(int64_t i) const override {
      Example e = UserData::get(i);
      if (i % 3 == 0) e.target = at::tensor(-100, at::kLong).reshape({});
      return e;
    }
  };
  struct LastEpoch : Callback {
    void on_epoch_end(const TrainState&, const EpochEvent& e) override {
      loss = e.train_loss, acc = e.train_acc;
    }
    double loss = 0, acc = -1;
  };
  Padded train(96), test(40);
  // The reference: one forward over a whole split, PyTorch's loss and the counted hits.
  auto reference = [](UserNet& net, const Dataset& d) {
    std::vector<at::Tensor> xs, ys;
    for (int64_t i = 0; i < d.size(); ++i) xs.push_back(d.get(i).input), ys.push_back(d.get(i).target);
    torch::NoGradGuard no_grad;
    const at::Tensor out = net.forward(at::stack(xs)), y = at::stack(ys);
    namespace F = torch::nn::functional;
    const double loss =
        F::cross_entropy(out, y, F::CrossEntropyFuncOptions().ignore_index(-100)).item<double>();
    const at::Tensor kept = y.ne(-100);
    const double acc =
        out.argmax(-1).eq(y).logical_and(kept).sum().item<double>() / kept.sum().item<double>();
    return std::pair{loss, acc};
  };
  TrainerOptions o = quiet_fp32(8, 1);
  o.loop.eval_every = 1;
  std::mutex mu;
  testing_dist::run_world(2, [&](const DistContext& ctx) {
    const auto net = make_net();
    torch::optim::SGD frozen(net->parameters(), torch::optim::SGDOptions(0.0));
    Trainer trainer(ctx, trainable(net), frozen, o, Objective::classification_ignoring(-100));
    auto last = std::make_shared<LastEpoch>();
    trainer.add_callback(last);
    const TrainResult r = trainer.fit(train, &test);
    std::lock_guard<std::mutex> lock(mu);
    const auto [train_loss, train_acc] = reference(*net, train);
    const auto [test_loss, test_acc] = reference(*net, test);
    EXPECT_NEAR(last->loss, train_loss, 1e-6) << "rank " << ctx.rank();
    EXPECT_NEAR(last->acc, train_acc, 1e-12) << "rank " << ctx.rank();
    EXPECT_NEAR(r.test_loss, test_loss, 1e-6) << "rank " << ctx.rank();
    EXPECT_NEAR(r.test_accuracy, test_acc, 1e-12) << "rank " << ctx.rank();
    EXPECT_GT(train_acc, 0.0);
  });
  // One batch: PyTorch's mean within rounding; a batch of only padding has loss 0 and zero
  // gradients (PyTorch's NaN would reach every weight); any other negative target is refused.
  const Objective ignoring = Objective::classification_ignoring(-100);
  const at::Tensor logits = at::randn({6, 4}, at::kFloat).requires_grad_(true);
  const at::Tensor some = at::tensor({0, -100, 3, 2, -100, 1}, at::kLong),
                   none = at::full({6}, -100, at::kLong);
  namespace F = torch::nn::functional;
  EXPECT_NEAR(ignoring.loss(logits, some).item<double>(),
              F::cross_entropy(logits, some, F::CrossEntropyFuncOptions().ignore_index(-100)).item<double>(),
              1e-6);
  EXPECT_EQ(ignoring.count(logits, some).item<int64_t>(), 4);
  const at::Tensor zero = ignoring.loss(logits, none);
  zero.backward();
  EXPECT_EQ(zero.item<double>(), 0.0);
  EXPECT_TRUE(logits.grad().eq(0).all().item<bool>()) << logits.grad();
  EXPECT_EQ(ignoring.count(logits, none).item<int64_t>(), 0);
  try {
    ignoring.check_targets(at::tensor({1, -100, -7}, at::kLong));
    ADD_FAILURE() << "a target of -7 was taken";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("a target of -7"), std::string::npos) << e.what();
  }
  ignoring.check_targets(some);  // -100 is taken
}
