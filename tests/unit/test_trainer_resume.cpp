// The Trainer's resume as a library user calls it, ranks as threads of this process over real
// Gloo: a resume ends bitwise equal to an uninterrupted run (from a stop's and a step's
// checkpoint), a mid-epoch resume of another training set is refused, and resume_from "auto"
// follows the run identity. Other resumes: test_trainer_contract.cpp, test_trainer_restart.cpp,
// test_trainer_resume_precision.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "trainer_fixtures.h"

using namespace ddptrain;
using namespace ddptrain::trainer_test;

// A checkpoint taken mid-epoch continues that epoch's order, drawn over the training set's
// size: a resume with a set of another size is refused on every rank naming both sizes (it
// would repeat or skip samples, or run past the order's end); so is a set of the same size read
// from other files (Dataset::files_hash: shards renamed, reordered or replaced; before, it
// resumed); the same set resumes.
TEST(Trainer, AResumeMidEpochWithATrainingSetOfAnotherSizeIsRefused) {
  const std::string dir = testing_dist::temp_dir("trainer_resume_other_set");
  TrainerOptions o = quiet_fp32(8, 1);  // 96 samples at world 2: 6 steps an epoch
  o.checkpoint.dir = dir;
  o.checkpoint.save_every_steps = 2;
  o.loop.max_steps = 2;
  struct FilesOf : UserData {  // a set that knows its files
    FilesOf(int64_t n, uint64_t files) : UserData(n, false), files(files) {}
    uint64_t files_hash() const override { return files; }
    uint64_t files;
  };
  auto fit = [&](const TrainerOptions& opts, int64_t samples, uint64_t files = 7) {
    std::vector<std::string> errors;
    std::mutex mu;
    testing_dist::run_world(2, [&](const DistContext& ctx) {
      Trainable model = native(make_net());
      const auto optimizer = make_optimizer(*model.module, false);
      FilesOf train(samples, files);
      Trainer trainer(ctx, std::move(model), *optimizer, opts);
      try {
        trainer.fit(train, nullptr);
      } catch (const UsageError& e) {
        std::lock_guard<std::mutex> lock(mu);
        errors.push_back(e.what());
      }
    });
    return errors;
  };
  ASSERT_TRUE(fit(o, 96).empty());
  TrainerOptions resumed = o;
  resumed.checkpoint.resume_from = "auto";
  resumed.loop.max_steps = 4;
  const std::vector<std::string> refused = fit(resumed, 80);
  ASSERT_EQ(refused.size(), 2u) << "not every rank refused";
  for (const std::string& e : refused)
    EXPECT_NE(
        e.find("stopped mid-epoch 1 of a training set of 96 samples, and this run's training set has 80"),
        std::string::npos)
        << e;
  const std::vector<std::string> other_files = fit(resumed, 96, 8);
  ASSERT_EQ(other_files.size(), 2u) << "not every rank refused other files";
  for (const std::string& e : other_files)
    EXPECT_NE(e.find("stopped mid-epoch 1 of a training set of 96 samples read from other files"),
              std::string::npos)
        << e;
  EXPECT_TRUE(fit(resumed, 96).empty()) << "the same set resumes";
}

TEST(Trainer, ResumeInProcessEndsBitwiseEqualToAnUninterruptedRun) {
  const std::string dir = testing_dist::temp_dir("trainer_resume");
  TrainerOptions o = quiet_fp32(8, 2);
  o.optim.lr_schedule = LrSchedule::kEpochCosine;
  o.checkpoint.dir = dir + "/whole";
  const Trained whole = train_user_net(2, o, mse(), true);
  o.checkpoint.dir = dir + "/parts";
  o.loop.max_steps = 4;  // stops mid-epoch 1 (6 steps per epoch): a mid-epoch checkpoint
  const Trained first = train_user_net(2, o, mse(), true);
  ASSERT_FALSE(first.result.last_checkpoint.empty());
  EXPECT_EQ(first.result.global_step, 4);
  o.loop.max_steps = 0;
  o.checkpoint.resume_from = first.result.last_checkpoint;
  const Trained resumed = train_user_net(2, o, mse(), true);
  EXPECT_EQ(resumed.steps.front(), 5) << "the resumed run continues the step count";
  EXPECT_EQ(resumed.result.global_step, 12);
  EXPECT_EQ(resumed.result.fingerprint, whole.result.fingerprint);
  EXPECT_EQ(whole.counted, 12);
  EXPECT_EQ(resumed.counted, 12) << "the user's part came back with the checkpoint (4) and counted on";
  EXPECT_EQ(max_diff(resumed.params, whole.params), 0.0);
  // From a step's checkpoint (save_every_steps), not a stop's: it is saved after the user's
  // on_step_end of that step, so their part holds 4 there (it held 3: the policy ran first).
  o.checkpoint.resume_from.clear();
  o.checkpoint.dir = dir + "/steps";
  o.checkpoint.save_every_steps = 4;  // step 4 (rotated away by the later saves) and step 8, mid-epoch 2
  ASSERT_EQ(train_user_net(2, o, mse(), true).result.global_step, 12);
  o.checkpoint.resume_from = dir + "/steps/step_00000008";
  o.checkpoint.dir = dir + "/from_steps";
  const Trained from_step = train_user_net(2, o, mse(), true);
  EXPECT_EQ(from_step.steps.front(), 9);
  EXPECT_EQ(from_step.counted, 12) << "the step checkpoint held the counter before its step's update";
  EXPECT_EQ(from_step.result.fingerprint, whole.result.fingerprint);
  std::filesystem::remove_all(dir);
}

// The CLI's --resume_from auto and its run identity are the library's (#29 item 4, Note [Run
// identity]): resume_from "auto" continues this run's newest checkpoint and starts fresh in an
// empty folder; a checkpoint of another run_identity is refused, naming what differs, whether
// auto finds only it or resume_from names it, and a fresh run into its folder is refused too.
TEST(Trainer, ResumeAutoFollowsTheRunIdentity) {
  const std::string dir = testing_dist::temp_dir("trainer_resume_auto");
  TrainerOptions o = quiet_fp32(4, 1);
  o.checkpoint.dir = dir;
  o.checkpoint.resume_from = "auto";
  o.run_identity = {{"data", "user data v1"}, {"lr", "0.1"}};
  o.loop.max_steps = 3;
  const Trained first = train_user_net(2, o);
  EXPECT_EQ(first.result.global_step, 3) << "auto in an empty folder starts fresh";
  ASSERT_FALSE(first.result.last_checkpoint.empty());
  const Trained again = train_user_net(2, o);
  EXPECT_FALSE(again.result.nothing_to_train.empty()) << "auto did not resume the step-3 checkpoint";
  o.loop.max_steps = 5;
  EXPECT_EQ(train_user_net(2, o).result.global_step, 5);
  // Another batch size that does not divide where the checkpoint stopped: refused, the field named.
  TrainerOptions odd = o;
  odd.data.batch_size = 3;
  try {
    train_user_net(2, odd);
    ADD_FAILURE() << "resumed 20 samples into the epoch in batches of 3";
  } catch (const UsageError& e) {
    EXPECT_EQ(
        std::string(e.what()).rfind(
            "TrainerOptions::data.batch_size=3: the checkpoint stopped 20 samples per rank into epoch 1", 0),
        0u)
        << e.what();
  }
  TrainerOptions other = o;
  other.run_identity["lr"] = "0.2";
  const auto listing = [&] {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().filename() != ".lock")  // Note [One run per checkpoint folder]: whose lock, not the run's
        names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  };
  const std::vector<std::string> before = listing();
  // "": a fresh run would write among (and rotate away) the other run's checkpoints.
  for (const std::string& from : {std::string("auto"), first.result.last_checkpoint, std::string()}) {
    other.checkpoint.resume_from = from;
    try {
      train_user_net(1, other);
      ADD_FAILURE() << "resume_from " << from << " continued another run";
    } catch (const UsageError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("belongs to another run; what differs: lr 0.2 (the checkpoint's: 0.1)"),
                std::string::npos)
          << what;
      const std::string where =
          from == "auto"
              ? "TrainerOptions::checkpoint.resume_from = auto: TrainerOptions::checkpoint.dir holds "
                "only another run's"
          : from.empty() ? "a new run: TrainerOptions::checkpoint.dir holds another run's checkpoints; the "
                           "newest '"
                         : "TrainerOptions::checkpoint.resume_from: the checkpoint '" + from;
      EXPECT_NE(what.find(where), std::string::npos) << what;
    }
  }
  EXPECT_EQ(listing(), before) << "a refused run changed the checkpoint folder";
  // A resume of this run's checkpoint into a folder of another run's: refused as well (its saves
  // would overwrite and rotate theirs away).
  const std::string theirs = testing_dist::temp_dir("trainer_resume_theirs");
  other.checkpoint.dir = theirs;
  other.checkpoint.resume_from = "";
  train_user_net(1, other);
  TrainerOptions into = o;
  into.checkpoint.dir = theirs;
  into.checkpoint.resume_from = first.result.last_checkpoint;
  try {
    train_user_net(2, into);
    ADD_FAILURE() << "resumed into another run's folder";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("a resume of TrainerOptions::checkpoint.resume_from: "
                                         "TrainerOptions::checkpoint.dir holds another run's checkpoints"),
              std::string::npos)
        << e.what();
  }
  // Note [A branch a run abandons]: a resume from an older checkpoint of this run (step 3 of
  // steps 3 and 5) sets the later one aside, so that auto and the rotation follow the new branch.
  ASSERT_EQ(listing(), (std::vector<std::string>{"step_00000003", "step_00000005"}));
  o.checkpoint.resume_from = first.result.last_checkpoint;
  o.loop.max_steps = 4;
  EXPECT_EQ(train_user_net(2, o).result.global_step, 4);
  EXPECT_EQ(listing(), (std::vector<std::string>{".superseded", "step_00000003", "step_00000004"}));
  o.checkpoint.resume_from = "auto";
  EXPECT_FALSE(train_user_net(2, o).result.nothing_to_train.empty()) << "auto went past step 4";
  // The same run started fresh into its own folder: its checkpoints are set aside too.
  o.checkpoint.resume_from = "";
  o.loop.max_steps = 2;
  EXPECT_EQ(train_user_net(1, o).result.global_step, 2);
  EXPECT_EQ(listing(), (std::vector<std::string>{".superseded", "step_00000002"}));
  size_t aside = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/.superseded")) aside += e.is_directory();
  EXPECT_EQ(aside, 3u) << "steps 5, then 3 and 4, kept aside";
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(theirs);
}
