// --zero_stage 1 and 2 from the command line (Notes [ZeRO stage 1] and [ZeRO stage 2], #15):
// at world 2 each rank holds half the optimizer state (and at stage 2 a quarter of stage 0's
// gradient memory) and training is stage 0's; a run SIGKILLed mid-epoch resumes bitwise at any
// stage; stages not built yet and combinations that cannot work are usage errors.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "e2e_helpers.h"
#include "proc.h"

using namespace ddptrain::e2e;

namespace {

std::vector<std::string> zero_train(const std::string& dir, int stage, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = tiny_train(dir + "/ck", {"--optimizer", "adamw", "--lr", "0.003", "--zero_stage",
                                                         std::to_string(stage), "--metrics_file", dir + "/m.jsonl"});
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// The last step record's value of `key` (-1 without one).
double last_step(const std::string& metrics, const std::string& key) {
  const std::vector<double> v = step_values(metrics, key);
  return v.empty() ? -1 : v.back();
}

std::string optimizer_fingerprint(const std::string& out) {
  const auto l = lines_with(out, "optimizer state fingerprint: ");
  return l.empty() ? "none" : l.front().substr(l.front().rfind(' ') + 1);
}

}  // namespace

TEST(Zero, StagesOneAndTwoHoldLessAndTrainAsStageZero) {
  const std::string a = fresh_dir("zero_stage0"), b = fresh_dir("zero_stage1"), c = fresh_dir("zero_stage2");
  ProcResult zero = run(launch(2, free_port(), zero_train(a, 0, {"--max_steps", "8"})), {}, 300);
  ASSERT_EQ(zero.exit_code, 0) << zero.output;
  ProcResult one = run(launch(2, free_port(), zero_train(b, 1, {"--max_steps", "8"})), {}, 300);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_EQ(fingerprints(zero.output).at(0), fingerprints(one.output).at(0)) << "stage 1 trained differently";
  EXPECT_EQ(fingerprints(one.output).at(0), fingerprints(one.output).at(1));
  EXPECT_EQ(optimizer_fingerprint(zero.output), optimizer_fingerprint(one.output)) << one.output;
  const double optim0 = last_step(a + "/m.jsonl", "optim_mib"), optim1 = last_step(b + "/m.jsonl", "optim_mib");
  std::printf("world 2, AdamW: optimizer state per rank %.4f MiB at stage 0, %.4f MiB at stage 1\n", optim0, optim1);
  EXPECT_GT(optim0, 0.0);
  EXPECT_LE(optim1, 0.51 * optim0);
  EXPECT_GE(optim1, 0.49 * optim0);
  EXPECT_EQ(last_step(a + "/m.jsonl", "param_mib"), last_step(b + "/m.jsonl", "param_mib"));
  EXPECT_GT(last_step(b + "/m.jsonl", "grad_mib"), 0.0);
  ProcResult two = run(launch(2, free_port(), zero_train(c, 2, {"--max_steps", "8"})), {}, 300);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_EQ(fingerprints(zero.output).at(0), fingerprints(two.output).at(0)) << "stage 2 trained differently";
  EXPECT_EQ(fingerprints(two.output).at(0), fingerprints(two.output).at(1));
  const double grad0 = last_step(a + "/m.jsonl", "grad_mib"), grad2 = last_step(c + "/m.jsonl", "grad_mib");
  std::printf("world 2: gradient memory per rank %.4f MiB at stage 0, %.4f MiB at stage 2\n", grad0, grad2);
  EXPECT_GT(grad2, 0.0);
  EXPECT_LE(grad2, 0.3 * grad0);  // stage 0: buckets + the parameters' gradients; stage 2: half of one
  EXPECT_LE(last_step(c + "/m.jsonl", "optim_mib"), 0.51 * optim0);
}

TEST(Zero, KilledMidEpochResumesBitwiseAtAnyStage) {
  const std::string whole = fresh_dir("zero_whole"), cut = fresh_dir("zero_cut");
  const std::vector<std::string> every5 = {"--dataset_size", "512", "--save_every_steps", "5"};
  ProcResult full = run(launch(2, free_port(), zero_train(whole, 2, every5)), {}, 300);
  ASSERT_EQ(full.exit_code, 0) << full.output;
  ProcResult killed = run(launch(2, free_port(), zero_train(cut, 2, every5)),
                          {{"DDPTRAIN_FAULT_KILL_AT_STEP", "12"}, {"DDPTRAIN_FAULT_RANK", "1"}}, 300);
  ASSERT_NE(killed.exit_code, 0) << killed.output;
  for (int stage : {2, 1, 0}) {
    const std::string dir = fresh_dir("zero_resumed" + std::to_string(stage));
    ProcResult copy = run({"cp", "-r", cut + "/ck", dir + "/ck"}, {}, 60);
    ASSERT_EQ(copy.exit_code, 0) << copy.output;
    std::vector<std::string> args = zero_train(dir, stage, every5);
    args.insert(args.end(), {"--resume_from", "auto"});
    ProcResult resumed = run(launch(2, free_port(), args), {}, 300);
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_FALSE(lines_with(resumed.output, "step_00000010").empty()) << resumed.output;
    EXPECT_EQ(fingerprints(resumed.output).at(0), fingerprints(full.output).at(0)) << "resumed at stage " << stage;
    EXPECT_EQ(optimizer_fingerprint(resumed.output), optimizer_fingerprint(full.output)) << "stage " << stage;
  }
}

// The memory bound: world 4, AdamW, GPT small (10.8M parameters; a short context to
// keep the test quick): a rank holds <= 0.3x stage 0's optimizer state at stage 1 and <= 0.3x
// its gradient memory at stage 2.
TEST(Zero, GptSmallAtWorldFourHoldsAQuarter) {
  std::map<int, std::string> metrics;
  for (int stage : {0, 1, 2}) {
    const std::string dir = fresh_dir("zero_gpt" + std::to_string(stage));
    metrics[stage] = dir + "/m.jsonl";
    ProcResult r = run(launch(4, free_port(), {"train", "--model", "gpt", "--gpt_preset", "small", "--dataset", "tokens",
                                               "--block_size", "16", "--dataset_size", "256", "--batch_size", "2",
                                               "--optimizer", "adamw", "--max_steps", "2", "--log_interval", "1",
                                               "--no-use_amp", "--num_workers", "0", "--threads", "1",
                                               "--eval_every", "0", "--save_every", "0", "--zero_stage",
                                               std::to_string(stage), "--checkpoint_dir", dir + "/ck",
                                               "--metrics_file", metrics[stage]}),
                       {}, 600);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  const double optim0 = last_step(metrics[0], "optim_mib"), optim1 = last_step(metrics[1], "optim_mib");
  const double grad0 = last_step(metrics[0], "grad_mib"), grad2 = last_step(metrics[2], "grad_mib");
  std::printf("GPT small, world 4, AdamW, per rank: optimizer state %.1f MiB (stage 0) -> %.1f MiB (stage 1); "
              "gradients %.1f MiB (stage 0) -> %.1f MiB (stage 2); parameters %.1f MiB\n",
              optim0, optim1, grad0, grad2, last_step(metrics[0], "param_mib"));
  EXPECT_GT(optim0, 0.0);
  EXPECT_LE(optim1, 0.3 * optim0);
  EXPECT_LE(grad2, 0.3 * grad0);
  EXPECT_LE(last_step(metrics[2], "optim_mib"), 0.3 * optim0);
}

TEST(Zero, StagesNotBuiltYetAndImpossibleCombinationsAreUsageErrors) {
  for (const std::string stage : {"3", "-1"}) {
    ProcResult r = run({binary(), "train", "--zero_stage", stage, "--max_steps", "1"}, {}, 60);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("--zero_stage=" + stage + " is not available"), std::string::npos) << r.output;
  }
  for (const std::vector<std::string>& extra : {std::vector<std::string>{"--ddp_comm_hook", "bf16"},
                                                std::vector<std::string>{"--gradient_as_bucket_view"}}) {
    std::vector<std::string> args = {binary(), "train", "--zero_stage", "2", "--max_steps", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    ProcResult r = run(args, {}, 60);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("--zero_stage 2 keeps only this rank's gradient shard"), std::string::npos) << r.output;
  }
}
