// Note [A run claims its checkpoint folder] for a library program: its Trainer claims the
// folder as `ddptrain train` does. Before, a Trainer took no lock (a second run on the folder
// cleaned the first's save in progress as leftovers), and set an abandoned branch aside only
// once its resume had loaded (a restart of an attempt that died before then continued the
// branch). And the ranks' choices of a checkpoint compared (Note [One checkpoint for every rank]).
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/abandoned_mark.h"
#include "checkpoint/folder_lock.h"
#include "train/folder_claim.h"
#include "train/resume.h"
#include "trainer_fixtures.h"

namespace ddptrain {
namespace {

using trainer_test::make_net;
using trainer_test::make_optimizer;
using trainer_test::quiet_fp32;
using trainer_test::UserData;

struct Program {
  Trainable model = native(make_net());
  std::unique_ptr<torch::optim::Optimizer> optimizer = make_optimizer(*model.module, /*adamw=*/false, false);
};

std::string claim_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a usage error: ") + e.what();
  }
  return "(no error)";
}

// Note [One run per checkpoint folder]: the lock is the open file's, so a second Trainer on the
// folder in the same process is refused as another process's would be, and its refused attempt
// does not drop the first's lock (closing a descriptor drops a POSIX lock of the whole process).
// The folder is free once the first Trainer's fit() has ended, or once it is gone.
TEST(Trainer, ASecondRunOnTheFolderIsRefusedEvenInTheSameProcess) {
  const std::string dir = testing_dist::temp_dir("trainer_claim_lock");
  DistContext ctx(EnvContract{}, {"auto", std::chrono::seconds(30)});
  TrainerOptions o = quiet_fp32(8, 1);
  o.checkpoint.dir = dir;
  o.loop.max_steps = 1;
  const auto refused = [&](const char* when) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      Program second;
      const std::string error = claim_error_of([&] { Trainer t(ctx, second.model, *second.optimizer, o); });
      EXPECT_NE(error.find("is in use by another run (this process"), std::string::npos)
          << when << ", attempt " << attempt << ": " << error;
    }
  };
  auto first = std::make_unique<Program>();
  auto holder = std::make_unique<Trainer>(ctx, first->model, *first->optimizer, o);
  refused("before the first's fit");
  holder.reset();  // the claim ends with its Trainer
  Program third;
  holder = std::make_unique<Trainer>(ctx, third.model, *third.optimizer, o);
  refused("before the third's fit");
  UserData train(96, false);
  o.checkpoint.resume_from = "auto";
  holder->fit(train, nullptr);  // the run ends with its fit: the folder is free, the Trainer kept
  Program fourth;
  EXPECT_EQ(claim_error_of([&] { Trainer t(ctx, fourth.model, *fourth.optimizer, o); }), "(no error)");
  std::filesystem::remove_all(dir);
}

// A program that claims first (its start-up is slow) gives the claim to its Trainer. The claim,
// made by the program's identity alone (here none: any checkpoint matches it), moves nothing;
// the Trainer checks the choice by its whole identity (the optimizer, the parameters, the seed)
// and only then sets the abandoned branch aside, so another run's checkpoints are refused and
// never moved, and the refused claim's mark is removed. The claim marks the branch at once
// (Note [A branch a run abandons]): an attempt that dies in its start-up leaves the mark, and
// its restart's auto skips the branch (before, it continued it). A claim of another folder is
// refused.
TEST(Trainer, AProgramsClaimMovesNothingUntilTheTrainerHasCheckedIt) {
  const std::string dir = testing_dist::temp_dir("trainer_claim_first");
  TrainerOptions o = trainer_test::four_steps_saved_every_two(dir);
  ASSERT_EQ(trainer_test::train_user_net(1, o).result.global_step, 4);
  const std::string later = dir + "/step_00000004";
  DistContext ctx(EnvContract{}, {"auto", std::chrono::seconds(30)});
  {  // another run (another seed) starting fresh there
    TrainerOptions other = o;
    other.loop.seed = 7;
    const std::shared_ptr<CheckpointFolderClaim> claim = claim_checkpoint_folder(other, ctx);
    EXPECT_FALSE(claim->resume.has_value());
    EXPECT_EQ(abandoned_checkpoints(dir), (std::set<std::string>{"step_00000002", "step_00000004"}));
    Program p;
    EXPECT_THROW(Trainer(ctx, p.model, *p.optimizer, other, Objective::classification(), claim), OptionError);
    EXPECT_TRUE(std::filesystem::exists(later)) << "another run's checkpoint was moved";
    EXPECT_FALSE(std::filesystem::exists(dir + "/.superseded"));
    EXPECT_TRUE(abandoned_checkpoints(dir).empty()) << "the refused claim's mark was left";
  }
  TrainerOptions again = o;
  again.checkpoint.resume_from = dir + "/step_00000002";
  {  // an attempt that resumes step 2, then dies in its start-up: its claim ends without a Trainer
    const std::shared_ptr<CheckpointFolderClaim> died = claim_checkpoint_folder(again, ctx);
    EXPECT_TRUE(std::filesystem::exists(later)) << "set aside before the Trainer checked the choice";
  }
  EXPECT_EQ(abandoned_checkpoints(dir), (std::set<std::string>{"step_00000004"}));
  TrainerOptions restarted = again;  // as a restart's rule makes it (continue_newest_on_restart)
  restarted.checkpoint.resume_from = "auto";
  const std::shared_ptr<CheckpointFolderClaim> claim = claim_checkpoint_folder(restarted, ctx);
  ASSERT_TRUE(claim->resume.has_value());
  EXPECT_EQ(claim->resume->meta.global_step, 2) << "the restart continued the abandoned branch";
  EXPECT_TRUE(std::filesystem::exists(later)) << "set aside before the Trainer checked the choice";
  {
    TrainerOptions elsewhere = again;
    elsewhere.checkpoint.dir = dir + "_other";
    Program p;
    EXPECT_THROW(Trainer(ctx, p.model, *p.optimizer, elsewhere, Objective::classification(), claim),
                 OptionError);
  }
  Program p;
  Trainer trainer(ctx, p.model, *p.optimizer, again, Objective::classification(), claim);
  EXPECT_TRUE(std::filesystem::exists(later)) << "set aside before the run's load and data were checked";
  int accepted = 0;
  claim->on_run_accepted = [&] {
    ++accepted;
    EXPECT_FALSE(std::filesystem::exists(later)) << "not set aside by the Trainer";
    EXPECT_TRUE(std::filesystem::exists(dir + "/.superseded"));
    EXPECT_TRUE(abandoned_checkpoints(dir).empty()) << "the mark outlived the move";
  };
  auto recorder = std::make_shared<trainer_test::Recorder>();
  trainer.add_callback(recorder);
  UserData train(96, false);
  const TrainResult r = trainer.fit(train, nullptr);
  EXPECT_EQ(accepted, 1) << "the program was not told its run was accepted";
  ASSERT_FALSE(recorder->steps.empty());
  EXPECT_EQ(recorder->steps.front(), 3) << "the claim's checkpoint was not the one resumed";
  EXPECT_EQ(r.global_step, 4);
  // A claim is one run's: given again, its choice (step 2) would set this fit's saves aside.
  Program next;
  const std::string error = claim_error_of(
      [&] { Trainer t(ctx, next.model, *next.optimizer, again, Objective::classification(), claim); });
  EXPECT_NE(error.find("was given to another already"), std::string::npos) << error;
  EXPECT_TRUE(std::filesystem::exists(later)) << "the fit's own save was set aside";
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(dir + "_other");
}

// A run refused after its Trainer has checked the claim's choice (here the resumed checkpoint
// stopped mid-epoch over 96 samples, and the data holds 80) leaves the folder as the claim left
// it: the later checkpoint in place and marked (a restart skips it; deleting the mark undoes
// that), nothing in .superseded/, and the program's part of the start (the CLI's config.json)
// not done. Before, the Trainer set the branch aside as it was built, before the load and the
// data's checks. The same resume with the checkpoint's data then sets it aside.
TEST(Trainer, ARunRefusedAfterItsClaimWasCheckedMovesNothing) {
  const std::string dir = testing_dist::temp_dir("trainer_refused_late");
  TrainerOptions o = trainer_test::four_steps_saved_every_two(dir);
  ASSERT_EQ(trainer_test::train_user_net(1, o).result.global_step, 4);
  const std::string later = dir + "/step_00000004";
  o.checkpoint.resume_from = dir + "/step_00000002";
  DistContext ctx(EnvContract{}, {"auto", std::chrono::seconds(30)});
  {
    TrainerOptions fresh = o;  // claimed by the program, as the CLI does
    const std::shared_ptr<CheckpointFolderClaim> claim = claim_checkpoint_folder(fresh, ctx);
    bool accepted = false;
    claim->on_run_accepted = [&] { accepted = true; };
    Program p;
    Trainer trainer(ctx, p.model, *p.optimizer, o, Objective::classification(), claim);
    UserData fewer(80, false);
    const std::string error = claim_error_of([&] { trainer.fit(fewer, nullptr); });
    EXPECT_NE(error.find("stopped mid-epoch 1 of a training set of 96 samples"), std::string::npos) << error;
    EXPECT_FALSE(accepted) << "a refused run was accepted";
  }
  EXPECT_TRUE(std::filesystem::exists(later + "/manifest.json")) << "set aside by a refused run";
  EXPECT_FALSE(std::filesystem::exists(dir + "/.superseded"));
  EXPECT_EQ(abandoned_checkpoints(dir), (std::set<std::string>{"step_00000004"}));
  {
    Program p;
    Trainer trainer(ctx, p.model, *p.optimizer, o);
    UserData train(96, false);
    EXPECT_EQ(trainer.fit(train, nullptr).global_step, 4);
  }
  int aside = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/.superseded")) aside += e.is_directory();
  EXPECT_EQ(aside, 1) << "the accepted resume did not set step 4 aside";
  EXPECT_TRUE(abandoned_checkpoints(dir).empty()) << "the mark outlived the move";
  std::filesystem::remove_all(dir);
}

// Note [A branch a run abandons]: a Trainer that refuses the checkpoint its claim chose (here
// another run's, by the seed the program's options do not hold) keeps the mark of the folder's
// later checkpoints, which are this run's: a restart (torchrun's, whatever the exit code)
// resumes auto, and without the mark it continued the branch the first attempt abandoned.
// The folder's newest for eval and export (find_latest_checkpoint) skips the marked ones too.
TEST(Trainer, ARefusalOfTheChosenCheckpointKeepsTheMarkOfThisRunsBranch) {
  const std::string dir = testing_dist::temp_dir("trainer_claim_kept_mark");
  TrainerOptions o = quiet_fp32(8, 1);
  o.checkpoint.dir = dir + "/run";
  o.checkpoint.save_every_steps = 2;
  o.loop.max_steps = 4;
  ASSERT_EQ(trainer_test::train_user_net(1, o).result.global_step, 4);
  TrainerOptions other = o;
  other.checkpoint.dir = dir + "/other";
  other.loop.seed = 7;
  ASSERT_EQ(trainer_test::train_user_net(1, other).result.global_step, 4);
  DistContext ctx(EnvContract{}, {"auto", std::chrono::seconds(30)});
  TrainerOptions again = o;
  again.checkpoint.resume_from = other.checkpoint.dir + "/step_00000002";
  const std::shared_ptr<CheckpointFolderClaim> claim = claim_checkpoint_folder(again, ctx);
  ASSERT_TRUE(claim->resume.has_value()) << "the program's options alone refused it";
  EXPECT_EQ(abandoned_checkpoints(o.checkpoint.dir), (std::set<std::string>{"step_00000004"}));
  // eval's and export's --checkpoint <folder> skip it as auto does
  EXPECT_EQ(find_latest_checkpoint(o.checkpoint.dir, ctx.log()), o.checkpoint.dir + "/step_00000002");
  Program p;
  EXPECT_THROW(Trainer(ctx, p.model, *p.optimizer, again, Objective::classification(), claim), OptionError);
  EXPECT_EQ(abandoned_checkpoints(o.checkpoint.dir), (std::set<std::string>{"step_00000004"}))
      << "the mark of this run's own branch was dropped";
  EXPECT_TRUE(std::filesystem::exists(o.checkpoint.dir + "/step_00000004"));
  std::filesystem::remove_all(dir);
}

// Note [Run identity]: another run's checkpoint that is incomplete (its optimizer.pt deleted to
// keep only the weights) is another run's all the same. A fresh start, or auto, in its folder is
// refused; before, the listing skipped it, and this run's save of the same step replaced its
// weights.
TEST(Trainer, AnotherRunsIncompleteCheckpointsAreAnotherRunsToo) {
  const std::string dir = testing_dist::temp_dir("trainer_claim_incomplete");
  TrainerOptions o = quiet_fp32(8, 1);
  o.checkpoint.dir = dir;
  o.checkpoint.save_every_steps = 2;
  o.loop.max_steps = 2;
  ASSERT_EQ(trainer_test::train_user_net(1, o).result.global_step, 2);
  const std::string theirs = dir + "/step_00000002";
  ASSERT_TRUE(std::filesystem::remove(theirs + "/optimizer.pt"));
  const auto weights = std::filesystem::last_write_time(theirs + "/model.pt");
  o.loop.seed = 7;  // another run
  for (const char* from : {"", "auto"}) {
    o.checkpoint.resume_from = from;
    try {
      trainer_test::train_user_net(1, o);
      ADD_FAILURE() << "resume_from '" << from << "': trained among another run's checkpoints";
    } catch (const OptionError& e) {
      EXPECT_NE(std::string(e.what()).find("holds another run's checkpoints; an incomplete one"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(std::filesystem::last_write_time(theirs + "/model.pt"), weights) << "their weights were replaced";
  std::filesystem::remove_all(dir);
}

// Note [A torchrun job's restarts]: a Trainer of a torchrun job (TORCHELASTIC_RUN_ID) keeps the
// job's marker in its folder when its run stops on a signal, however the stop ends: here a step's
// callback asks for the stop and then throws (as a collective does when torchrun SIGKILLs a
// slow peer after its grace). Before, only a fit that returned kept it, and the uncounted
// restart started afresh. A run that ends without a stop removes it.
TEST(Trainer, AStopAskedForKeepsTheTorchrunJobsMarkerHoweverTheRunEnds) {
  const std::string dir = testing_dist::temp_dir("trainer_job_marker");
  EnvContract env;
  env.job_id = "job-x";
  DistContext ctx(env, {"auto", std::chrono::seconds(30)});
  struct StopThenFail : Callback {
    int* asked;
    explicit StopThenFail(int* a) : asked(a) {}
    void on_step_end(const TrainState& s, const StepEvent&) override {
      if (s.global_step < 2) return;
      *asked = SIGTERM;
      throw Error("a peer's connection closed");
    }
  };
  for (const bool stop : {false, true}) {
    int asked = 0;
    TrainerOptions o = quiet_fp32(8, 1);
    o.checkpoint.dir = dir;
    o.loop.max_steps = 3;
    o.stop_requested = [&] { return asked; };
    Program p;
    UserData train(96, false);
    {
      Trainer t(ctx, p.model, *p.optimizer, o);
      EXPECT_TRUE(std::filesystem::exists(dir + "/.torchrun_job")) << "the claim writes it";
      if (stop) t.add_callback(std::make_shared<StopThenFail>(&asked));
      if (stop)
        EXPECT_THROW(t.fit(train, nullptr), Error);
      else
        t.fit(train, nullptr);
    }
    EXPECT_EQ(std::filesystem::exists(dir + "/.torchrun_job"), stop) << (stop ? "stopped" : "finished");
  }
  std::filesystem::remove_all(dir);
}

// Note [One run per checkpoint folder]: a restart goes on past a lock a dead node holds (a network
// filesystem's lease) whichever rank's launcher counted it, and so does a start of the torchrun
// job that started last in the folder (Note [A torchrun job's restarts]); under torchrun rank 0's
// node may restart uncounted (Note [An agent store outlives its attempts]). Before, only rank 0's
// own count let it pass, and such a job ended with exit 2.
TEST(Trainer, AJobsRestartGoesPastADeadNodesLockWhicheverRankCountedIt) {
  const std::string dir = testing_dist::temp_dir("trainer_claim_dead_lock");
  const Logger log;
  CheckpointFolderLock held(dir, log, /*restart=*/false);
  {  // held elsewhere: the file names a process of another host (the lock stays this descriptor's)
    std::ofstream named(dir + "/.lock", std::ios::trunc);
    named << "123 node-that-died";
  }
  const auto claim_on = [&](int world, const std::function<void(EnvContract&)>& adjust) {
    std::vector<std::string> errors(static_cast<size_t>(world), "(no error)");
    std::vector<int> restarts(static_cast<size_t>(world), -1);
    testing_dist::run_ranks(
        world,
        [&](const DistContext& ctx) {
          TrainerOptions o = quiet_fp32(8, 1);
          o.checkpoint.dir = dir;
          const auto r = static_cast<size_t>(ctx.rank());
          errors[r] = claim_error_of([&] { restarts[r] = claim_checkpoint_folder(o, ctx)->restart_count; });
        },
        60, {"gloo"}, adjust);
    return std::make_pair(errors, restarts);
  };
  const auto [refused, none] = claim_on(1, nullptr);  // a first start
  EXPECT_NE(refused[0].find("process 123 on node-that-died holds"), std::string::npos) << refused[0];
  const auto [counted, counts] = claim_on(2, [](EnvContract& env) { env.restart_count = env.rank; });
  EXPECT_EQ(counted, std::vector<std::string>(2, "(no error)"));
  EXPECT_EQ(counts, std::vector<int>({1, 1})) << "rank 0's node restarted uncounted: the job's restart";
  {
    std::ofstream marker(dir + "/.torchrun_job");
    marker << "job-z\n";
  }
  const auto [again, zero] = claim_on(1, [](EnvContract& env) { env.job_id = "job-z"; });
  EXPECT_EQ(again[0], "(no error)");
  EXPECT_EQ(zero[0], 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ddptrain

using namespace ddptrain;
using namespace ddptrain::trainer_test;

// Note [One checkpoint for every rank]: a checkpoint every rank names alike whose copies differ
// (node-local folders where one node keeps an older job's save of that step): every rank stops
// naming the ranks whose manifest differs. Before, each loaded its own, after DDP's one
// broadcast of the weights: replicas apart for the whole run.
TEST(Trainer, RanksWhoseCopiesOfTheNamedCheckpointDifferStopTogether) {
  std::vector<std::string> errors(2);
  testing_dist::run_world(2, [&](const DistContext& ctx) {
    const std::string manifest =
        ctx.rank() == 0 ? R"({"files": {"model.pt": [100, 7]}})" : R"({"files": {"model.pt": [100, 8]}})";
    try {
      check_ranks_chose_the_same(ctx, "/ck/step_00000600", manifest, "/ck/step_00000600", "--resume_from");
    } catch (const UsageError& e) {
      errors[static_cast<size_t>(ctx.rank())] = e.what();
    }
  });
  for (const std::string& e : errors)
    EXPECT_NE(e.find("the ranks' copies of '/ck/step_00000600' differ: rank(s) 1 hold other files"),
              std::string::npos)
        << e;
  testing_dist::run_world(2, [&](const DistContext& ctx) {  // the same copies: no error
    check_ranks_chose_the_same(ctx, "/ck/step_00000600", "{}", "/ck/step_00000600", "--resume_from");
  });
}

// The Trainer compares a named checkpoint too (it compared auto's choices only): ranks that
// each name another folder's checkpoint (steps 2 and 3 of two runs) stop together before
// anything is loaded. Before, each resumed its own.
TEST(Trainer, RanksThatNameDifferentCheckpointsStopTogether) {
  const std::string dir = testing_dist::temp_dir("trainer_named_differs");
  std::vector<std::string> named;
  for (int r = 0; r < 2; ++r) {
    TrainerOptions first = quiet_fp32(8, 1);
    first.checkpoint.dir = dir + "/rank" + std::to_string(r);
    first.loop.max_steps = 2 + r;
    named.push_back(train_user_net(1, first).result.last_checkpoint);
    ASSERT_FALSE(named.back().empty());
  }
  std::vector<std::string> errors(2);
  testing_dist::run_world(2, [&](const DistContext& ctx) {
    Trainable model = native(make_net());
    const auto optimizer = make_optimizer(*model.module, false);
    TrainerOptions mine = quiet_fp32(8, 1);
    mine.checkpoint.dir = dir + "/rank" + std::to_string(ctx.rank());
    mine.checkpoint.resume_from = named[static_cast<size_t>(ctx.rank())];
    try {
      Trainer trainer(ctx, std::move(model), *optimizer, mine);
    } catch (const UsageError& e) {
      errors[static_cast<size_t>(ctx.rank())] = e.what();
    }
  });
  for (const std::string& e : errors)
    EXPECT_NE(e.find("the ranks chose different checkpoints from"), std::string::npos) << e;
  std::filesystem::remove_all(dir);
}
