// End-to-end tests of precision: autocast and the loss scaler under DDP (a NaN on one rank
// skips the step on every rank), recompute, bf16 on CPU (it trains; --amp_dtype auto measures
// it and a resume keeps what it chose). The real ddptrain binary, real processes, Gloo.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "e2e_helpers.h"
#include "proc.h"

using namespace ddptrain::e2e;

TEST(E2E, MixedPrecisionScalingAndRecompute) {
  const int port = free_port();
  // A NaN in rank 1's loss at step 3: the all-reduce spreads it, every rank skips step 3,
  // the scale backs off, and the replicas stay bitwise equal.
  const std::string nan_dir = fresh_dir("amp_nan");
  ProcResult nan = run(launch(2, port,
                              tiny_train(nan_dir, {"--epochs", "2", "--grad_scaler", "on", "--clip_grad_norm",
                                                   "1.0", "--metrics_file", nan_dir + "/m.jsonl"})),
                       {{"DDPTRAIN_FAULT_NAN_AT_STEP", "3"}, {"DDPTRAIN_FAULT_RANK", "1"}}, 300);
  ASSERT_EQ(nan.exit_code, 0) << nan.output;
  EXPECT_EQ(
      lines_with(nan.output, "optimizer step 3 skipped: inf/NaN gradients; loss scale now 32768").size(), 2u)
      << nan.output;
  EXPECT_EQ(lines_with(nan.output, "skipped:").size(), 2u) << "only step 3 is skipped: " << nan.output;
  EXPECT_FALSE(lines_with(nan.output, "1 steps skipped (inf/NaN)").empty()) << nan.output;
  std::vector<int64_t> skipped_per_epoch;  // each epoch's own (it was the run's so far in every later one)
  for (const auto& rec : read_jsonl(nan_dir + "/m.jsonl"))
    if (rec.value("kind", "") == "epoch") skipped_per_epoch.push_back(rec.at("skipped_steps").get<int64_t>());
  EXPECT_EQ(skipped_per_epoch, (std::vector<int64_t>{1, 0}));
  auto fp = fingerprints(nan.output);
  ASSERT_EQ(fp.size(), 2u) << nan.output;
  EXPECT_EQ(fp[0], fp[1]) << "ranks diverged after a skipped step";
  EXPECT_NE(fp[0].find_first_not_of("0"), std::string::npos);

  // Recompute under DDP, with dropout: bitwise the run without it.
  std::vector<std::string> drop = {"--epochs", "1", "--dropout", "0.1"};
  ProcResult plain = run(launch(2, port, tiny_train(fresh_dir("rc_plain"), drop)), {}, 300);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  drop.insert(drop.end(), {"--activation_checkpointing", "blocks"});
  ProcResult rc = run(launch(2, port, tiny_train(fresh_dir("rc_on"), drop)), {}, 300);
  ASSERT_EQ(rc.exit_code, 0) << rc.output;
  EXPECT_FALSE(lines_with(rc.output, "activation checkpointing: each block is recomputed").empty());
  EXPECT_EQ(fingerprints(plain.output).at(0), fingerprints(rc.output).at(0))
      << "recompute changed the result";
  EXPECT_EQ(fingerprints(rc.output).at(0), fingerprints(rc.output).at(1));

  // A partial accumulation group ends each epoch: 256 samples / 2 ranks / batch 16 = 8
  // micro-batches, K = 3 -> steps of 3, 3 and 2.
  ProcResult acc = run(launch(2, port,
                              tiny_train(fresh_dir("acc_partial"), {"--epochs", "1", "--grad_accum_steps",
                                                                    "3", "--log_interval", "1"})),
                       {}, 300);
  ASSERT_EQ(acc.exit_code, 0) << acc.output;
  EXPECT_FALSE(lines_with(acc.output, "accumulates 2 micro-batches instead of 3").empty()) << acc.output;
  EXPECT_FALSE(lines_with(acc.output, "epoch 1 step 3/3").empty()) << acc.output;
}

namespace {

// The first line of a metrics file: the "run" record.
nlohmann::json run_record(const std::string& metrics_path) {
  std::ifstream in(metrics_path);
  std::string line;
  std::getline(in, line);
  auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j.at("kind"), "run") << line;
  return j;
}

}  // namespace

TEST(E2E, Bf16OnCpuTrainsFashionMnist) {
  const std::string dir = fresh_dir("bf16");
  ProcResult r =
      run({binary(),           "train", "--dataset",      "fashion-mnist",  "--width",       "0.25",
           "--batch_size",     "64",    "--lr",           "0.05",           "--max_steps",   "50",
           "--log_interval",   "10",    "--amp_dtype",    "bf16",           "--num_workers", "1",
           "--checkpoint_dir", dir,     "--metrics_file", dir + "/m.jsonl", "--eval_every",  "0"},
          {}, 300);  // no evaluation: bf16 on a CPU without bf16 instructions is slow
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(lines_with(r.output, "precision: bf16 autocast").empty()) << r.output;
  EXPECT_EQ(run_record(dir + "/m.jsonl").at("precision"), "bf16");
  const auto losses = step_losses(r.output, "bf16 Fashion-MNIST loss every 10 steps");
  ASSERT_EQ(losses.size(), 5u) << r.output;
  EXPECT_LT(losses.back(), losses.front() * 0.8) << r.output;
}

// --amp_dtype auto (the default) measures on a fresh start, averaged over the ranks, and
// says so in the log and the metrics file; a resumed run keeps the precision its checkpoint
// recorded, whatever the probe would say now (so the resume stays bitwise exact).
TEST(E2E, AutoPrecisionIsMeasuredAndKeptByAResume) {
  const int port = free_port();
  const std::string fresh = fresh_dir("auto_fresh"), dir = fresh_dir("auto_resume");
  ProcResult r =
      run(launch(2, port,
                 tiny_train(fresh, {"--use_amp", "--epochs", "1", "--metrics_file", fresh + "/m.jsonl"})),
          {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto measured = run_record(fresh + "/m.jsonl");
  const std::string chosen = measured.at("precision"), why = measured.at("precision_why");
  std::printf("--amp_dtype auto on this CPU: %s\n", why.c_str());
  EXPECT_TRUE(chosen == "fp32" || chosen == "bf16") << chosen;
  EXPECT_NE(why.find("amp_dtype=auto measured bf16 runs at"), std::string::npos) << why;
  EXPECT_NE(why.find("averaged over 2 ranks"), std::string::npos) << why;
  EXPECT_FALSE(lines_with(r.output, "precision: " + chosen).empty()) << r.output;
  EXPECT_EQ(nlohmann::json::parse(read_text(fresh + "/epoch_0001/meta.json")).at("precision"), chosen);

  // Started in bf16, resumed with auto: bf16, from the checkpoint.
  ProcResult first =
      run(launch(2, port, tiny_train(dir, {"--use_amp", "--amp_dtype", "bf16", "--epochs", "1"})), {}, 300);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ProcResult resumed =
      run(launch(2, port,
                 tiny_train(dir, {"--use_amp", "--resume_from", "auto", "--metrics_file", dir + "/m.jsonl"})),
          {}, 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto kept = run_record(dir + "/m.jsonl");
  EXPECT_EQ(kept.at("precision"), "bf16");
  EXPECT_NE(kept.at("precision_why").get<std::string>().find("as chosen when the resumed run started"),
            std::string::npos)
      << kept;
}

// --deterministic (Note [Deterministic GPU runs]) asks LibTorch for deterministic algorithms:
// the run record says so, and on the CPU, where every run repeats bitwise anyway, it changes
// nothing (GPT, with SDPA, and MiniResNet, with its global pool). A CUBLAS_WORKSPACE_CONFIG of
// the user's with which cuBLAS does not repeat is refused before anything runs.
TEST(E2E, DeterministicIsRecordedAndChangesNothingOnCpu) {
  std::vector<std::string> steps = {"--max_steps", "6", "--log_interval", "2", "--eval_every", "0"};
  auto gpt = [&](const std::string& name, std::vector<std::string> extra) {
    const std::string dir = fresh_dir(name);
    extra.insert(extra.end(), steps.begin(), steps.end());
    extra.insert(extra.end(), {"--metrics_file", dir + "/m.jsonl"});
    std::vector<std::string> argv = {binary()};
    for (const auto& a : gpt_text_train(dir, extra)) argv.push_back(a);
    ProcResult r = run(argv, {}, 300);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return dir + "/m.jsonl";
  };
  // --tf32 (TF32 matmuls on CUDA: nothing on a CPU either) rides along, recorded as set.
  const std::string plain = gpt("det_off", {}), det = gpt("det_on", {"--deterministic", "--tf32"});
  EXPECT_EQ(run_record(plain).at("deterministic_algorithms"), false);
  EXPECT_EQ(run_record(det).at("deterministic_algorithms"), true);
  EXPECT_EQ(run_record(plain).at("tf32_matmuls"), false);
  EXPECT_EQ(run_record(det).at("tf32_matmuls"), true);
  const auto plain_losses = step_values(plain, "loss"), det_losses = step_values(det, "loss");
  ASSERT_EQ(plain_losses.size(), 3u);
  EXPECT_EQ(plain_losses, det_losses) << "--deterministic changed a CPU run";

  const std::string dir = fresh_dir("det_resnet");
  std::vector<std::string> resnet = {binary()};
  for (const auto& a :
       tiny_train(dir, {"--epochs", "1", "--deterministic", "--metrics_file", dir + "/m.jsonl"}))
    resnet.push_back(a);
  ProcResult r = run(resnet, {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(run_record(dir + "/m.jsonl").at("deterministic_algorithms"), true);

  ProcResult bad = run(resnet, {{"CUBLAS_WORKSPACE_CONFIG", ":0:0"}}, 60);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("CUBLAS_WORKSPACE_CONFIG=':0:0'"), std::string::npos) << bad.output;
}
