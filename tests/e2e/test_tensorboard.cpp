// TensorBoard across a resume: a run killed after logging steps past its last checkpoint,
// then resumed, logs those steps again. The metrics file keeps both runs' records (each with
// its run id); TensorBoard's own reader (EventAccumulator, PyPI tensorboard) shows each step
// once, the resumed run's: ddptrain writes a SessionLog START at the resumed run's first step,
// as PyTorch's SummaryWriter(purge_step=...) does.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "e2e_helpers.h"
#include "proc.h"

using namespace ddptrain::e2e;

TEST(TensorBoard, AResumeReplacesTheStepsItTrainsAgain) {
  const std::string dir = fresh_dir("tb_resume");
  const std::vector<std::string> flags = {
      "--epochs",           "2",        "--log_interval", "2",
      "--save_every_steps", "4",        "--metrics_file", dir + "/m.jsonl",
      "--tensorboard_dir",  dir + "/tb"};
  const int port = free_port();
  ProcResult killed = run(launch(2, port, tiny_train(dir, flags)), fault_at_step("KILL", 7, 1), 300);
  ASSERT_NE(killed.exit_code, 0) << killed.output;
  std::vector<std::string> again = flags;
  again.insert(again.end(), {"--resume_from", "auto"});
  ProcResult resumed = run(launch(2, port, tiny_train(dir, again)), {}, 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  int sixes = 0;  // step 6: logged by the killed run after its step-4 checkpoint, and again
  for (const auto& rec : read_jsonl(dir + "/m.jsonl"))
    sixes += rec.value("kind", "") == "step" && rec.value("step", 0) == 6 ? 1 : 0;
  ASSERT_EQ(sixes, 2) << "the test needs a step logged twice";
  ProcResult tb = run({"/usr/bin/python3", "-s", source_dir() + "/tests/python/read_tensorboard.py",
                       dir + "/tb", dir + "/m.jsonl"},
                      {{"PYTHONPATH", source_dir() + "/.pydeps-tb"}}, 120);
  EXPECT_EQ(tb.exit_code, 0) << "a step twice in TensorBoard (no SessionLog START?): " << tb.output;
  EXPECT_NE(tb.output.find("TB OK"), std::string::npos) << tb.output;
}

// A launcher's restart whose failed attempt saved nothing starts afresh, at step 0: its steps
// replace the attempt's in TensorBoard too (a SessionLog START at step 1; it wrote none, as
// for a fresh run, and TensorBoard showed steps 2 and 4 twice, zigzagging).
TEST(TensorBoard, ARestartThatStartsAfreshReplacesTheFailedAttemptsSteps) {
  const std::string dir = fresh_dir("tb_restart_fresh");
  const std::vector<std::string> flags = {
      "--epochs",          "1",        "--log_interval", "2", "--metrics_file", dir + "/m.jsonl",
      "--tensorboard_dir", dir + "/tb"};
  ProcResult r =
      run(launch_restarting(2, free_port(), 1, tiny_train(dir, flags)), fault_at_step("KILL", 5, 1), 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int fours = 0, restarted = 0;
  for (const auto& rec : read_jsonl(dir + "/m.jsonl")) {
    fours += rec.value("kind", "") == "step" && rec.value("step", 0) == 4 ? 1 : 0;
    restarted += rec.value("kind", "") == "run" && rec.value("restart_count", 0) == 1 ? 1 : 0;
  }
  ASSERT_EQ(fours, 2) << "the test needs a step logged by both attempts: " << r.output;
  EXPECT_EQ(restarted, 1);
  ProcResult tb = run({"/usr/bin/python3", "-s", source_dir() + "/tests/python/read_tensorboard.py",
                       dir + "/tb", dir + "/m.jsonl"},
                      {{"PYTHONPATH", source_dir() + "/.pydeps-tb"}}, 120);
  EXPECT_EQ(tb.exit_code, 0) << "a step twice in TensorBoard: " << tb.output;
  EXPECT_NE(tb.output.find("TB OK"), std::string::npos) << tb.output;
}

// Note [Evaluation owed]: a stop during an epoch's evaluation writes the epoch's record
// (eval_interrupted), and the run that resumes makes the evaluation and writes the epoch's
// record again, at the same step (evaluation_resumed). TensorBoard shows the epoch once, with
// its evaluation: the stopped run writes its training points (a run never resumed had none for
// the epoch), the resumed run only the evaluation's (both were shown: the resumed run's
// SessionLog START is at its first step, one later).
TEST(TensorBoard, AnEpochWhoseEvaluationAStopEndedIsShownOnce) {
  const std::string dir = fresh_dir("tb_eval_stop");
  const std::vector<std::string> flags = {"--epochs",          "2",        "--metrics_file", dir + "/m.jsonl",
                                          "--tensorboard_dir", dir + "/tb"};
  const auto epoch_one = [&](const char* mark) {
    int n = 0;
    for (const auto& rec : read_jsonl(dir + "/m.jsonl"))
      n += rec.value("kind", "") == "epoch" && rec.value("epoch", 0) == 1 && rec.value(mark, false) ? 1 : 0;
    return n;
  };
  ProcResult stopped =
      run(launch(2, free_port(), gpt_text_train(dir, flags)), {{"DDPTRAIN_FAULT_TERM_IN_EVAL", "1"}}, 300);
  ASSERT_EQ(epoch_one("eval_interrupted"), 1)
      << "the test needs a stop during the evaluation: " << stopped.output;
  const auto read_tensorboard = [&] {
    return run({"/usr/bin/python3", "-s", source_dir() + "/tests/python/read_tensorboard.py", dir + "/tb",
                dir + "/m.jsonl"},
               {{"PYTHONPATH", source_dir() + "/.pydeps-tb"}}, 120);
  };
  ProcResult tb = read_tensorboard();
  EXPECT_EQ(tb.exit_code, 0) << "the stopped run's epoch is not in TensorBoard: " << tb.output;
  std::vector<std::string> again = flags;
  again.insert(again.end(), {"--resume_from", "auto"});
  ProcResult resumed = run(launch(2, free_port(), gpt_text_train(dir, again)), {}, 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  ASSERT_EQ(epoch_one("evaluation_resumed"), 1) << resumed.output;
  tb = read_tensorboard();
  EXPECT_EQ(tb.exit_code, 0) << "an epoch shown twice in TensorBoard: " << tb.output;
  EXPECT_NE(tb.output.find("TB OK"), std::string::npos) << tb.output;
}

// Note [A torchrun job's restarts]: torchrun starts a stopped job's workers again without counting
// a restart (a node joined). An attempt stopped before it saved anything starts again at step 0:
// its steps replace the stopped attempt's in TensorBoard (a SessionLog START at step 1; there was
// none, as for a fresh run, and the epoch's steps were shown twice).
TEST(TensorBoard, ATorchrunJobStartedAgainAfreshReplacesTheStoppedAttemptsSteps) {
  const std::string dir = fresh_dir("tb_job_again");
  const std::vector<std::string> flags = {"--epochs",
                                          "2",
                                          "--log_interval",
                                          "2",
                                          "--save_every",
                                          "0",
                                          "--no-checkpoint_on_signal",
                                          "--metrics_file",
                                          dir + "/m.jsonl",
                                          "--tensorboard_dir",
                                          dir + "/tb"};
  std::map<std::string, std::string> env = {
      {"RANK", "0"},
      {"WORLD_SIZE", "1"},
      {"TORCHELASTIC_RUN_ID", "tb-job"},
      {"TORCHELASTIC_RESTART_COUNT", "0"},
      {"DDPTRAIN_FAULT_TERM_IN_EVAL", "1"}};  // SIGTERM in epoch 1's evaluation
  std::vector<std::string> argv = gpt_text_train(dir, flags);
  argv.insert(argv.begin(), binary());
  ProcResult stopped = run(argv, env, 300);
  env.erase("DDPTRAIN_FAULT_TERM_IN_EVAL");
  ProcResult again = run(argv, env, 300);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  int twos = 0;
  std::vector<int64_t> starts;
  for (const auto& rec : read_jsonl(dir + "/m.jsonl")) {
    twos += rec.value("kind", "") == "step" && rec.value("step", 0) == 2 ? 1 : 0;
    if (rec.value("kind", "") == "run") starts.push_back(rec.value("step", -1));
  }
  ASSERT_EQ(starts, std::vector<int64_t>({0, 0}))
      << "the test needs two starts at step 0: " << stopped.output;
  ASSERT_EQ(twos, 2) << "the test needs a step logged by both attempts: " << stopped.output;
  ProcResult tb = run({"/usr/bin/python3", "-s", source_dir() + "/tests/python/read_tensorboard.py",
                       dir + "/tb", dir + "/m.jsonl"},
                      {{"PYTHONPATH", source_dir() + "/.pydeps-tb"}}, 120);
  EXPECT_EQ(tb.exit_code, 0) << "a step twice in TensorBoard: " << tb.output;
  EXPECT_NE(tb.output.find("TB OK"), std::string::npos) << tb.output;
}
