// A library program restarted by its launcher (TORCHELASTIC_RESTART_COUNT > 0: torchrun's agent
// or `ddptrain launch --max_restarts` runs it again with the same options) continues this run's
// newest checkpoint, as `ddptrain train` does (CheckpointOptions::resume_on_restart). Before,
// the Trainer took resume_from as given: "" started over at step 0 and set the first
// attempt's checkpoints aside; an explicit checkpoint resumed that one and set its own later
// progress aside.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "trainer_fixtures.h"

namespace ddptrain {
namespace {

using trainer_test::make_net;
using trainer_test::make_optimizer;
using trainer_test::quiet_fp32;
using trainer_test::UserData;

struct Attempt {
  int64_t first_step = -1;  // the first step this attempt trained (-1: none)
  int64_t global_step = 0;
};

// One attempt at world 1 with the launcher's restart count, up to max_steps.
Attempt attempt(int restart_count, TrainerOptions o) {
  EnvContract env;
  env.restart_count = restart_count;
  DistContext ctx(env, {"auto", std::chrono::seconds(30)});
  Trainable model = native(make_net());
  const auto optimizer = make_optimizer(*model.module, /*adamw=*/false, /*fused=*/false);
  Trainer trainer(ctx, std::move(model), *optimizer, o);
  auto recorder = std::make_shared<trainer_test::Recorder>();
  trainer.add_callback(recorder);
  UserData train(96, false);
  const TrainResult r = trainer.fit(train, nullptr);
  return {recorder->steps.empty() ? -1 : recorder->steps.front(), r.global_step};
}

TEST(Trainer, ARestartContinuesTheNewestCheckpointOfTheRun) {
  const std::string dir = testing_dist::temp_dir("trainer_restart");
  for (const bool explicit_start : {false, true}) {
    std::filesystem::remove_all(dir);
    TrainerOptions o = quiet_fp32(8, 1);
    o.checkpoint.dir = dir + "/run";
    o.checkpoint.save_every_steps = 2;
    o.loop.max_steps = 2;
    if (explicit_start) {  // the first attempt resumed step 2 of an earlier run
      TrainerOptions earlier = o;
      earlier.checkpoint.dir = dir + "/earlier";
      ASSERT_EQ(attempt(0, earlier).global_step, 2);
      o.checkpoint.resume_from = dir + "/earlier/step_00000002";
    }
    o.loop.max_steps = explicit_start ? 4 : 2;
    const Attempt first = attempt(0, o);  // the first attempt saves and (here) dies
    ASSERT_EQ(first.global_step, o.loop.max_steps);
    o.loop.max_steps = 6;
    const Attempt restarted = attempt(1, o);
    EXPECT_EQ(restarted.first_step, first.global_step + 1) << "explicit start: " << explicit_start;
    EXPECT_EQ(restarted.global_step, 6);
    EXPECT_FALSE(std::filesystem::exists(o.checkpoint.dir + "/.superseded"))
        << "the first attempt's progress was set aside";
    // Off (a program that chose already, as `ddptrain train` does): resume_from as given.
    o.checkpoint.resume_on_restart = false;
    o.checkpoint.resume_from = "";
    o.loop.max_steps = 2;
    EXPECT_EQ(attempt(1, o).first_step, 1);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ddptrain
