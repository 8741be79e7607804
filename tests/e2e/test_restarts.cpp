// Restarts: what a restarted worker resumes (torchrun's restarts, as `ddptrain launch`'s) and
// what `ddptrain launch --max_restarts` does not restart.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "e2e_helpers.h"
#include "proc.h"

using namespace ddptrain::e2e;
namespace fs = std::filesystem;

// torchrun restarts its workers with the same flags: a restart (TORCHELASTIC_RESTART_COUNT > 0)
// continues this run's newest checkpoint, as `ddptrain launch` makes its restarts do, not the
// --resume_from the first attempt was given (before, it went back there and set the attempt's
// later checkpoints aside).
TEST(E2E, ATorchrunRestartContinuesTheNewestCheckpoint) {
  const std::string ck = fresh_dir("torchrun_restart");
  const auto gpt = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), {"--epochs", "1", "--save_every_steps", "5", "--log_interval", "1"});
    std::vector<std::string> a = gpt_text_train(ck, extra);
    a.insert(a.begin(), binary());
    return a;
  };
  ProcResult first = run(gpt({"--max_steps", "10"}), {}, 300);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_TRUE(fs::exists(ck + "/step_00000010/manifest.json")) << first.output;
  ProcResult again = run(
      gpt({"--max_steps", "12", "--resume_from", ck + "/step_00000005", "--metrics_file", ck + "/m.jsonl"}),
      {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"TORCHELASTIC_RESTART_COUNT", "1"}}, 300);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  const std::vector<double> steps = step_values(ck + "/m.jsonl", "step");
  ASSERT_FALSE(steps.empty()) << again.output;
  EXPECT_EQ(steps.front(), 11) << again.output;
  EXPECT_FALSE(fs::exists(ck + "/.superseded")) << again.output;
}

// `launch --max_restarts` does not restart a usage error (exit 2): it would repeat, and a
// restart resumes `auto`, which after a refused explicit --resume_from is the branch the user
// chose to leave. The report counts the restarts made (it said "after 2 restarts").
TEST(E2E, LaunchDoesNotRestartAUsageError) {
  const std::string ck = fresh_dir("launch_exit2");
  std::vector<std::string> first = tiny_train(ck, {"--max_steps", "2", "--save_every_steps", "2"});
  first.insert(first.begin(), binary());
  ASSERT_EQ(run(first, {}, 300).exit_code, 0);
  ASSERT_TRUE(fs::exists(ck + "/step_00000002/manifest.json"));
  std::vector<std::string> a = {binary(),         "launch", "--nproc_per_node", "1",
                                "--max_restarts", "2",      "--master_port",    std::to_string(free_port())};
  for (const auto& w : tiny_train(ck, {"--dataset_size", "80", "--resume_from", ck + "/step_00000002"}))
    a.push_back(w);
  ProcResult r = run(a, {}, 300);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("not restarting after rank 0's usage error (exit 2)"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("restarting the workers"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("after 2 restarts"), std::string::npos) << r.output;
}
