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
