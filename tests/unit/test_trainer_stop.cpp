// The Trainer's stop as a library program asks for it (Note [Agreed stop]), ranks as threads
// of this process over real Gloo: a request on one rank stops every rank at the same step,
// at an epoch's end when it comes in its last steps, before the first step when it comes
// during start-up; every rank names the signal and the rank that received it.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "train/owed_evaluation.h"
#include "trainer_fixtures.h"

using namespace ddptrain;
using namespace ddptrain::trainer_test;

// Note [Agreed stop]: a stop request that reaches one rank two steps before an epoch's end is
// found by the last step's vote (at step 4: read at step 6), one during the second-to-last step
// by the vote the last step starts, which the epoch's end drains (at step 5). Either way the run
// stops at the epoch's end and saves. Without an evaluation due (eval_every 0), the drained vote
// was dropped before, and the run stopped two steps into epoch 2, mid-epoch. With one due, the
// checkpoint owes it (Note [Evaluation owed]), so the resumed run makes it: before, a stop found
// at the last step saved the epoch as evaluated-for, and its evaluation was never made. Every
// rank names the signal and the rank that received it (rank 0, which received none, used to
// report SIGTERM whatever the signal was).
TEST(Trainer, AStopRequestAtAnEpochsLastStepStopsAtItsEnd) {
  struct RequestAtStep : Callback {
    explicit RequestAtStep(int64_t at) : at(at) {}
    void on_step_end(const TrainState& s, const StepEvent&) override {
      if (s.global_step == at) *requested = 2;  // after this step's vote began (SIGINT)
    }
    int64_t at;
    std::shared_ptr<std::atomic<int>> requested = std::make_shared<std::atomic<int>>(0);
  };
  for (int64_t at : {4, 5})
    for (int eval_every : {0, 1}) {
      SCOPED_TRACE("request after step " + std::to_string(at) + ", eval_every " + std::to_string(eval_every));
      const std::string dir = testing_dist::temp_dir("trainer_stop_at_epoch_end");
      std::map<int, TrainResult> results;
      std::mutex mu;
      testing_dist::run_world(2, [&](const DistContext& ctx) {
        Trainable model = native(make_net());
        const auto optimizer = make_optimizer(*model.module, false);
        TrainerOptions o = quiet_fp32(8, 2);  // 96 samples, world 2: 6 steps an epoch
        o.checkpoint.dir = dir;
        o.loop.eval_every = eval_every;
        auto request = std::make_shared<RequestAtStep>(at);
        if (ctx.rank() == 1) o.stop_requested = [r = request->requested] { return r->load(); };
        Trainer trainer(ctx, std::move(model), *optimizer, o, Objective::classification());
        trainer.add_callback(request);
        UserData train(96, false), test(40, false);
        const TrainResult r = trainer.fit(train, &test);
        std::lock_guard<std::mutex> lock(mu);
        results[ctx.rank()] = r;
      });
      for (const auto& [rank, r] : results) {
        EXPECT_EQ(r.global_step, 6) << "rank " << rank;
        EXPECT_EQ(r.stopped_by_signal, 2) << "rank " << rank;
        EXPECT_EQ(r.stop_requested_by, 1) << "rank " << rank;
        EXPECT_FALSE(r.evaluated) << "rank " << rank;
      }
      ASSERT_TRUE(std::filesystem::exists(dir + "/epoch_0001/manifest.json"));
      std::ifstream meta(dir + "/epoch_0001/meta.json");
      EXPECT_EQ(nlohmann::json::parse(meta).contains(kEvaluationOwedKey), eval_every == 1);
      std::filesystem::remove_all(dir);
    }
}

// Note [Agreed stop]: a request made during start-up, on one rank, stops every rank before the
// first step, with nothing trained and nothing saved. It used to be read by the vote at step 2,
// after two steps and a checkpoint (--checkpoint_on_signal).
TEST(Trainer, AStopRequestedDuringStartUpStopsBeforeTheFirstStep) {
  for (const int world : {1, 2}) {
    SCOPED_TRACE("world " + std::to_string(world));
    const std::string dir = testing_dist::temp_dir("trainer_stop_at_start");
    std::map<int, TrainResult> results;
    std::mutex mu;
    testing_dist::run_world(world, [&](const DistContext& ctx) {
      Trainable model = native(make_net());
      const auto optimizer = make_optimizer(*model.module, false);
      TrainerOptions o = quiet_fp32(8, 2);
      o.checkpoint.dir = dir;
      if (ctx.rank() == world - 1) o.stop_requested = [] { return 2; };  // before fit() began
      Trainer trainer(ctx, std::move(model), *optimizer, o, Objective::classification());
      UserData train(96, false), test(40, false);
      const TrainResult r = trainer.fit(train, &test);
      std::lock_guard<std::mutex> lock(mu);
      results[ctx.rank()] = r;
    });
    ASSERT_EQ(results.size(), static_cast<size_t>(world));
    for (const auto& [rank, r] : results) {
      EXPECT_EQ(r.run_steps, 0) << "rank " << rank;
      EXPECT_EQ(r.stopped_by_signal, 2) << "rank " << rank;
      EXPECT_EQ(r.stop_requested_by, world - 1) << "rank " << rank;
      EXPECT_FALSE(r.evaluated) << "rank " << rank;
      EXPECT_EQ(r.last_checkpoint, "") << "rank " << rank;
    }
    for (const auto& e : std::filesystem::directory_iterator(dir))
      EXPECT_FALSE(std::filesystem::exists(e.path() / "manifest.json")) << e.path() << " was saved";
    std::filesystem::remove_all(dir);
  }
}
