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

#include "trainer_fixtures.h"

using namespace ddptrain;
using namespace ddptrain::trainer_test;

// Note [Every rank holds the same data]: rank 1's copy of the training data is 8 samples
// short (a sync still running) and, in a second fit, its test split is missing. Every rank
// stops before it trains, with the same usage error naming rank 1 and both sizes. Before,
// each rank drew its own order over its own size (samples trained twice or never) and, where
// the step counts differed, hung at the next collective.
TEST(Trainer, RanksHoldingDifferentDataStopTogether) {
  for (const bool test_missing : {false, true}) {
    std::vector<std::string> errors(2);
    std::vector<int> usage(2, 0);
    testing_dist::run_world(2, [&](const DistContext& ctx) {
      Trainable model = native(make_net());
      const auto optimizer = make_optimizer(*model.module, false);
      try {
        Trainer trainer(ctx, std::move(model), *optimizer, quiet_fp32(8, 1));
        UserData train(ctx.rank() == 1 && !test_missing ? 88 : 96, false), test(32, false);
        trainer.fit(train, ctx.rank() == 1 && test_missing ? nullptr : &test);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(ctx.rank())] = e.what();
        usage[static_cast<size_t>(ctx.rank())] = dynamic_cast<const UsageError*>(&e) != nullptr;
      }
    });
    const std::string want = test_missing ? "the ranks hold different test data: rank 0: 32 samples"
                                          : "the ranks hold different training data: rank 0: 96 samples";
    const std::string rank1 = test_missing ? "rank 1: no such split" : "rank 1: 88 samples";
    for (int r = 0; r < 2; ++r) {
      EXPECT_TRUE(usage[r]) << "rank " << r << ": " << errors[r];
      EXPECT_NE(errors[r].find(want), std::string::npos) << errors[r];
      EXPECT_NE(errors[r].find(rank1), std::string::npos) << errors[r];
    }
  }
}

// --profile_first_step 4 --profile_steps 2 (counted from 1): the Chrome trace holds the run's
// steps 3 and 4 counted from 0, each with its phases; the default window is steps 2 to 4.
TEST(Trainer, AProfileTracesTheStepsItIsGiven) {
  for (const auto& [first, count] : {std::pair<int, int>{4, 2}, std::pair<int, int>{3, 3}}) {
    const std::string dir = testing_dist::temp_dir("trainer_profile_window");
    TrainerOptions o = quiet_fp32(8, 1);
    o.checkpoint.dir = dir;
    o.loop.max_steps = 7;
    o.report.enable_profiling = true;
    o.report.profile_first_step = first;
    o.report.profile_steps = count;
    ASSERT_EQ(train_user_net(1, o).result.global_step, 7);
    std::ifstream in(dir + "/trace_rank0.json");
    const auto trace = nlohmann::json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
    std::set<int64_t> steps;
    int forwards = 0;
    for (const auto& e : trace.at("traceEvents")) {
      if (e.at("ph") != "X") continue;
      steps.insert(e.at("args").at("step").get<int64_t>());
      forwards += e.at("name") == "fwd";
    }
    std::set<int64_t> want;
    for (int s = first - 1; s < first - 1 + count; ++s) want.insert(s);
    EXPECT_EQ(steps, want) << "--profile_first_step " << first << " --profile_steps " << count;
    EXPECT_EQ(forwards, count);
    std::filesystem::remove_all(dir);
  }
  TrainerOptions o = quiet_fp32(8, 1);
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
