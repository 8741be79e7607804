// Token shards end to end (#30 item 1): GPT trains at world 2 on llm.c shards with a nanoGPT
// validation file; a run killed mid-epoch resumes bitwise equal to the uninterrupted one, and
// at another world size trains each window of the interrupted epoch once; 3 GB of shards train
// in the memory of a few (the files are read where they lie, never whole).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "e2e_helpers.h"
#include "proc.h"

using namespace ddptrain::e2e;
namespace fs = std::filesystem;

namespace {

// numpy's shards (tests/python/token_shards.py): llmc/ two uint16 files (59 windows of 64),
// nanogpt/train.bin one (46 windows), used here as the validation split.
std::string numpy_shards(const std::string& dir) {
  ProcResult py = run({python(), source_dir() + "/tests/python/token_shards.py", dir, "64"}, {}, 120);
  EXPECT_EQ(py.exit_code, 0) << py.output;
  return dir;
}

std::vector<std::string> shard_train(const std::string& data, const std::string& run_dir,
                                     std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"train",
                                "--model",
                                "gpt",
                                "--gpt_preset",
                                "debug",
                                "--vocab_size",
                                "50257",
                                "--block_size",
                                "64",
                                "--dataset",
                                "token_shards",
                                "--data_path",
                                data + "/llmc/shard_*.bin",
                                "--val_path",
                                data + "/nanogpt/train.bin",
                                "--batch_size",
                                "4",
                                "--epochs",
                                "2",
                                "--num_workers",
                                "1",
                                "--threads",
                                "1",
                                "--no-use_amp",
                                "--save_every_steps",
                                "3",
                                "--checkpoint_dir",
                                run_dir + "/ck",
                                "--trace_samples_dir",
                                run_dir + "/trace",
                                "--metrics_file",
                                run_dir + "/m.jsonl"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

}  // namespace

TEST(TokenShards, KilledMidEpochResumesBitwiseAndAtAnotherWorldTrainsEachWindowOnce) {
  const std::string data = numpy_shards(fresh_dir("shards_data"));
  const std::string whole = fresh_dir("shards_whole"), cut = fresh_dir("shards_cut");
  // 59 windows, world 2, batch 4: 7 steps per epoch (one window dropped); checkpoints every 3.
  ProcResult w = run(launch(2, free_port(), shard_train(data, whole)), {}, 300);
  ASSERT_EQ(w.exit_code, 0) << w.output;
  int evaluated = 0;
  for (const auto& rec : read_jsonl(whole + "/m.jsonl"))
    if (rec.value("kind", "") == "epoch" && rec.contains("test_loss")) {
      ++evaluated;
      EXPECT_GT(rec.at("test_loss").get<double>(), 0.0);
    }
  EXPECT_EQ(evaluated, 2) << "the validation shards are evaluated after each epoch";
  EXPECT_EQ(traced_samples(whole + "/trace", 2, 1).size(), 56u);
  // Rank 1 SIGKILLs itself after step 11: the checkpoint of step 9 is 2 steps into epoch 2.
  ProcResult k = run(launch(2, free_port(), shard_train(data, cut)), fault_at_step("KILL", 11, 1), 300);
  ASSERT_NE(k.exit_code, 0) << k.output;
  const std::string other = fresh_dir("shards_other_world");
  fs::copy(cut + "/ck", other + "/ck", fs::copy_options::recursive);

  const std::string resumed = fresh_dir("shards_resumed");
  auto args = shard_train(data, resumed, {"--resume_from", "auto"});
  std::replace(args.begin(), args.end(), resumed + "/ck", cut + "/ck");
  ProcResult r = run(launch(2, free_port(), args), {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(lines_with(r.output, "resuming from " + cut + "/ck/step_00000009").empty()) << r.output;
  EXPECT_EQ(fingerprints(w.output).at(0), fingerprints(r.output).at(0)) << "the resumed run differs";
  EXPECT_TRUE(read_text(whole + "/ck/epoch_0002/model.pt") == read_text(cut + "/ck/epoch_0002/model.pt"))
      << "model.pt differs after the resume";

  // The same checkpoint at world 3: epoch 2's windows each trained once across both runs.
  const std::string three = fresh_dir("shards_three");
  auto args3 = shard_train(data, three, {"--resume_from", "auto"});
  std::replace(args3.begin(), args3.end(), three + "/ck", other + "/ck");
  ProcResult t = run(launch(3, free_port(), args3), {}, 300);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  expect_epoch_two_trained_once(whole + "/trace", cut + "/trace", three + "/trace", 2, "windows");
}

TEST(TokenShards, ThreeGigabytesTrainInTheMemoryOfAFewMegabytes) {
  const std::string dir = fresh_dir("shards_large");
  // A sparse file: 1.5 G tokens (all 0) on disk in no blocks; the small one holds 64 windows.
  fs::resize_file((std::ofstream(dir + "/large.bin"), dir + "/large.bin"), uint64_t{3} << 30);
  fs::resize_file((std::ofstream(dir + "/small.bin"), dir + "/small.bin"), 64 * 1024 * 2 + 2);
  double peak[2] = {0, 0};
  const char* files[2] = {"large.bin", "small.bin"};
  for (int i = 0; i < 2; ++i) {
    const std::string out = dir + "/" + files[i] + ".d";
    ProcResult p = run({binary(),
                        "train",
                        "--model",
                        "gpt",
                        "--gpt_preset",
                        "debug",
                        "--vocab_size",
                        "256",
                        "--block_size",
                        "1024",
                        "--dataset",
                        "token_shards",
                        "--data_path",
                        dir + "/" + files[i],
                        "--batch_size",
                        "2",
                        "--max_steps",
                        "5",
                        "--num_workers",
                        "2",
                        "--threads",
                        "1",
                        "--no-use_amp",
                        "--save_every",
                        "0",
                        "--checkpoint_dir",
                        out,
                        "--metrics_file",
                        out + "/m.jsonl"},
                       {}, 300);
    ASSERT_EQ(p.exit_code, 0) << p.output;
    for (const auto& rec : read_jsonl(out + "/m.jsonl"))
      if (rec.value("kind", "") == "epoch") peak[i] = rec.at("peak_rss_mib_per_rank")[0].get<double>();
    ASSERT_GT(peak[i], 0) << "no epoch record in " << out;
  }
  std::printf("peak RSS: %.0f MiB on 3 GiB of shards, %.0f MiB on 128 KiB\n", peak[0], peak[1]);
  EXPECT_LT(peak[0], 500.0);
  // The sampler's permutation is 8 bytes a window (1.5 M windows: 12 MiB), as PyTorch's.
  EXPECT_LT(peak[0] - peak[1], 64.0) << "the shards' size shows in the resident set";
}
