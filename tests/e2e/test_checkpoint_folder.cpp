// What a run does to its checkpoint folder before it trains: one run at a time (Note [One run
// per checkpoint folder]), and the branch a resume of an older checkpoint abandons marked
// before the slow start-up (Note [A branch a run abandons]).
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "e2e_helpers.h"
#include "proc.h"

using namespace ddptrain::e2e;
namespace fs = std::filesystem;

namespace {

// A copy of the GPL text the GPT runs train on, which a test can take away.
std::string corpus_copy(const std::string& dir) {
  const std::string path = dir + "/corpus.txt";
  fs::copy_file(kGplText, path, fs::copy_options::overwrite_existing);
  return path;
}

// The worker's command line as one process runs it, not launched.
std::vector<std::string> folder_test_argv(std::vector<std::string> args) {
  args.insert(args.begin(), binary());
  return args;
}

// ddptrain train with `args`, its --data_path replaced by `corpus`: one process, not launched.
std::vector<std::string> on(const std::string& corpus, std::vector<std::string> args) {
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--data_path") args[i + 1] = corpus;
  return folder_test_argv(args);
}

}  // namespace

// Resuming epoch 1 of a run whose folder holds its epoch 2 abandons epoch 2: it is marked as
// soon as the checkpoint is chosen and verified, before the data opens, and moved aside once
// the run has checked it is its own. Here the data is gone, so the run stops there (exit 2)
// with epoch 2 in place and marked, and the folder's config.json still the first run's; a restart of the job
// (which resumes auto) with the data back skips it, resumes epoch 1, sets epoch 2 aside and trains its own
// epoch 2. (Before the mark, the claim moved epoch 2 at once, which could move another run's; before that,
// nothing was done, and the restart continued the abandoned branch.)
TEST(CheckpointFolder, AResumeOfAnOlderCheckpointMarksTheBranchBeforeTheDataOpens) {
  const std::string data = fresh_dir("branch_data"), ck = fresh_dir("branch_ck");
  const std::string corpus = corpus_copy(data);
  ProcResult first = run((on(corpus, gpt_text_train(ck, {"--epochs", "2", "--max_steps", "0"}))), {}, 300);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_TRUE(fs::exists(ck + "/epoch_0002")) << first.output;
  const std::string first_config = read_text(ck + "/config.json");
  fs::remove(corpus);
  ProcResult resumed =
      run((on(corpus, gpt_text_train(ck, {"--epochs", "2", "--resume_from", ck + "/epoch_0001"}))), {}, 120);
  EXPECT_EQ(resumed.exit_code, 2) << resumed.output;
  EXPECT_EQ(read_text(ck + "/config.json"), first_config) << "a refused run rewrote the folder's flags";
  EXPECT_TRUE(fs::exists(ck + "/epoch_0002/manifest.json")) << resumed.output;
  EXPECT_FALSE(fs::exists(ck + "/.superseded")) << resumed.output;
  EXPECT_TRUE(fs::exists(ck + "/.abandoned.json")) << resumed.output;
  corpus_copy(data);
  ProcResult restarted =
      run((on(corpus, gpt_text_train(ck, {"--epochs", "2", "--resume_from", ck + "/epoch_0001"}))),
          {{"TORCHELASTIC_RESTART_COUNT", "1"}}, 300);
  ASSERT_EQ(restarted.exit_code, 0) << restarted.output;
  int aside = 0;
  if (fs::exists(ck + "/.superseded"))
    for (const auto& e : fs::directory_iterator(ck + "/.superseded"))
      aside += e.path().filename().string().rfind("epoch_0002", 0) == 0;
  EXPECT_EQ(aside, 1) << "the restart resumed the abandoned epoch 2: " << restarted.output;
  EXPECT_TRUE(fs::exists(ck + "/epoch_0002/manifest.json")) << "the restart did not train epoch 2";
  EXPECT_FALSE(fs::exists(ck + "/.abandoned.json")) << "the mark outlived the move";
}

// Note [One run per checkpoint folder]: while a run trains, a second run on its folder stops
// with exit 2 naming the first's process, and touches nothing; once the first is killed, the
// kernel has dropped its lock and a run on the folder starts.
TEST(CheckpointFolder, ASecondRunOnAFolderInUseStopsNamingTheFirst) {
  const std::string data = fresh_dir("lock_data"), ck = fresh_dir("lock_ck");
  const std::string corpus = corpus_copy(data);
  const pid_t first = spawn((on(corpus, gpt_text_train(ck, {"--epochs", "100"}))), data + "/first.log");
  for (int i = 0; i < 600 && !fs::exists(ck + "/config.json"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(fs::exists(ck + "/config.json")) << "the first run did not start";
  ProcResult second = run((on(corpus, gpt_text_train(ck, {"--epochs", "1"}))), {}, 120);
  EXPECT_EQ(second.exit_code, 2) << second.output;
  EXPECT_FALSE(
      lines_with(second.output, "is in use by another run (process " + std::to_string(first) + " holds")
          .empty())
      << second.output;
  ::kill(first, SIGKILL);
  EXPECT_EQ(wait_for(first, 30), 128 + SIGKILL);
  ProcResult third =
      run((on(corpus, gpt_text_train(ck, {"--epochs", "1", "--max_steps", "1", "--resume_from", "auto"}))),
          {}, 120);
  EXPECT_EQ(third.exit_code, 0) << third.output;
}

// Each torchrun agent counts its own restarts, and a node that joins late counts 0. Two ranks
// started by hand, rank 0 at its first restart (TORCHELASTIC_RESTART_COUNT=1) and rank 1 at 0,
// in a folder holding the run's epoch 1: both treat the start as the restart it is and resume
// epoch 1 (before, rank 1 started fresh, and their collectives parted: a hang until the timeout).
TEST(CheckpointFolder, RanksThatCountRestartsDifferentlyAgreeItIsARestart) {
  const std::string ck = fresh_dir("restart_counts");
  ProcResult first = run(folder_test_argv(tiny_train(ck, {"--epochs", "1"})), {}, 120);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string port = std::to_string(free_port());
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r)
    pids.push_back(spawn(folder_test_argv(tiny_train(ck, {"--epochs", "2", "--dist_timeout_s", "20"})),
                         ck + "/rank" + std::to_string(r) + ".log",
                         {{"RANK", std::to_string(r)},
                          {"WORLD_SIZE", "2"},
                          {"MASTER_ADDR", "127.0.0.1"},
                          {"MASTER_PORT", port},
                          {"TORCHELASTIC_RESTART_COUNT", r == 0 ? "1" : "0"}}));
  for (int r = 0; r < 2; ++r) {
    const int code = wait_for(pids[static_cast<size_t>(r)], 60);
    if (code == -1) ::kill(pids[static_cast<size_t>(r)], SIGKILL);
    std::ifstream in(ck + "/rank" + std::to_string(r) + ".log");
    const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(code, 0) << "rank " << r << ":\n" << log;
    if (r == 0) {
      EXPECT_FALSE(lines_with(log, "resuming from " + ck + "/epoch_0001").empty()) << log;
    }
  }
  EXPECT_TRUE(fs::exists(ck + "/epoch_0002"));
  EXPECT_FALSE(fs::exists(ck + "/.superseded")) << "epoch 1 was set aside as a fresh start's";
}

// Note [A torchrun job's restarts]: torchrun restarts a job's workers when a node joins without
// counting a restart (TORCHELASTIC_RESTART_COUNT stays 0 in a job that never failed); it stops
// them with SIGTERM first. A start of the job (TORCHELASTIC_RUN_ID) after its run stopped on a
// signal resumes its newest checkpoint, as a counted restart does; before, it started afresh and
// set the checkpoints aside. A start after the run finished, or after a start without an id (a
// static rendezvous' "none") came between, is a new launch reusing the id: it starts as its flags
// say (a fresh start here).
TEST(CheckpointFolder, ATorchrunJobStartedAgainAfterASignalResumesItsNewestCheckpoint) {
  const std::string ck = fresh_dir("torchrun_job");
  const auto start = [&](const std::string& job, bool stopped_in_epoch_one) {
    std::map<std::string, std::string> env = {{"RANK", "0"},
                                              {"WORLD_SIZE", "1"},
                                              {"TORCHELASTIC_RUN_ID", job},
                                              {"TORCHELASTIC_RESTART_COUNT", "0"}};
    if (stopped_in_epoch_one) env["DDPTRAIN_FAULT_TERM_IN_EVAL"] = "1";  // SIGTERM at epoch 1's evaluation
    return run(folder_test_argv(gpt_text_train(ck, {"--epochs", "2", "--max_steps", "0"})), env, 300);
  };
  const auto resumed = [](const ProcResult& r) { return !lines_with(r.output, "resuming from").empty(); };
  const auto set_aside = [&] {  // a fresh start moved the run's checkpoints there
    const bool was = fs::exists(ck + "/.superseded");
    fs::remove_all(ck + "/.superseded");
    return was;
  };
  ProcResult stopped = start("job-a", true);
  ASSERT_TRUE(fs::exists(ck + "/epoch_0001")) << stopped.output;
  ASSERT_FALSE(fs::exists(ck + "/epoch_0002")) << "the run was not stopped: " << stopped.output;
  ProcResult again = start("job-a", false);
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_FALSE(lines_with(again.output, "torchrun job 'job-a' started again in this folder").empty())
      << again.output;
  EXPECT_TRUE(resumed(again)) << again.output;
  EXPECT_TRUE(fs::exists(ck + "/epoch_0002"));
  EXPECT_FALSE(set_aside()) << "the checkpoints were set aside as a fresh start's";
  ProcResult finished_before = start("job-a", false);  // the job's run had finished
  EXPECT_EQ(finished_before.exit_code, 0) << finished_before.output;
  EXPECT_FALSE(resumed(finished_before)) << finished_before.output;
  EXPECT_TRUE(set_aside()) << finished_before.output;
  start("job-a", true);
  for (const std::string job : {"none", "job-a"}) {  // a start without an id came between
    ProcResult r = start(job, false);
    EXPECT_EQ(r.exit_code, 0) << job << ": " << r.output;
    EXPECT_FALSE(resumed(r)) << job << ": " << r.output;
    EXPECT_TRUE(set_aside()) << job << ": the fresh start set nothing aside";
  }
}
