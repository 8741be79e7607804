// Hugging Face GPT-2 end to end (#31, GPT-2 part): `ddptrain train --init_from_hf DIR` takes a
// folder transformers saved (its sizes and weights) and trains it at world 2; `export --format
// hf` writes a folder transformers' from_pretrained loads with no missing, unexpected or
// mismatched tensor; eval of the checkpoint needs no folder; a size flag against the config is
// refused. Numerics (logits, loss, round trips) are the unit tests' (HfGpt2.*).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "e2e_helpers.h"
#include "proc.h"

using namespace ddptrain::e2e;
namespace fs = std::filesystem;

TEST(HfGpt2, TrainsFromAHuggingFaceFolderAtWorld2AndExportsWhatTransformersLoads) {
  if (run({python(), "-c", "import transformers"}, {}, 60).exit_code != 0)
    GTEST_SKIP() << python()
                 << " has no transformers (scripts/install_deps.sh test installs it for pip's torches)";
  const std::string dir = fresh_dir("hf_e2e");
  ProcResult make = run({python(), source_dir() + "/tests/python/hf.py", "make", dir + "/gpt2"}, {}, 120);
  ASSERT_EQ(make.exit_code, 0) << make.output;
  // nanoGPT's token files (uint16) of the model's 96-token vocabulary: 64 windows to train, 8 to validate.
  for (const auto& [name, n] : {std::pair{"train.bin", 64 * 16 + 1}, std::pair{"val.bin", 8 * 16 + 1}}) {
    std::string bytes;
    for (int i = 0; i < n; ++i) {
      const auto tok = static_cast<uint16_t>((i * 37 + n) % 96);
      bytes.append(reinterpret_cast<const char*>(&tok), 2);
    }
    std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
  }
  const std::vector<std::string> train = {"train",
                                          "--model",
                                          "gpt",
                                          "--init_from_hf",
                                          dir + "/gpt2",
                                          "--dataset",
                                          "token_shards",
                                          "--data_path",
                                          dir + "/train.bin",
                                          "--val_path",
                                          dir + "/val.bin",
                                          "--batch_size",
                                          "4",
                                          "--epochs",
                                          "1",
                                          "--optimizer",
                                          "adamw",
                                          "--lr",
                                          "1e-3",
                                          "--num_workers",
                                          "1",
                                          "--checkpoint_dir",
                                          dir + "/ck",
                                          "--metrics_file",
                                          dir + "/m.jsonl"};
  ProcResult t = run(launch(2, free_port(), train), {}, 300);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_FALSE(lines_with(t.output, "initial weights from " + dir + "/gpt2").empty()) << t.output;
  EXPECT_FALSE(
      lines_with(t.output, "gpt (2 layers, 2 heads, 32 wide, block 16, vocab 96, GELU tanh)").empty())
      << t.output;
  ProcResult e = run(
      {binary(), "export", "--checkpoint", dir + "/ck", "--format", "hf", "--out", dir + "/out"}, {}, 120);
  ASSERT_EQ(e.exit_code, 0) << e.output;
  ProcResult load = run(
      {python(), source_dir() + "/tests/python/hf.py", "logits", dir + "/out", "2", "16", dir + "/logits"},
      {}, 120);
  EXPECT_EQ(load.exit_code, 0) << load.output;
  EXPECT_NE(read_text(dir + "/logits.loss"), "");
  // A resume with the same command (it reads the folder's config again, not its weights).
  std::vector<std::string> more = train;
  more.insert(more.end(), {"--resume_from", "auto", "--epochs", "2"});
  ProcResult r = run(launch(2, free_port(), more), {}, 300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(lines_with(r.output, "resuming from " + dir + "/ck/epoch_0001").empty()) << r.output;
  // The folder as --init_from is --init_from_hf: the same sizes and activation.
  ProcResult as_init =
      run({binary(), "train", "--model", "gpt", "--init_from", dir + "/gpt2", "--dataset", "token_shards",
           "--data_path", dir + "/train.bin", "--max_steps", "1", "--checkpoint_dir", dir + "/ck_init"},
          {}, 120);
  EXPECT_EQ(as_init.exit_code, 0) << as_init.output;
  EXPECT_FALSE(lines_with(as_init.output, "GELU tanh)").empty()) << as_init.output;
  // Eval builds the model from the checkpoint's sizes: the folder may be gone.
  fs::rename(dir + "/gpt2", dir + "/gone");
  ProcResult ev = run({binary(), "eval", "--checkpoint", dir + "/ck"}, {}, 120);
  EXPECT_EQ(ev.exit_code, 0) << ev.output;
  fs::rename(dir + "/gone", dir + "/gpt2");
  std::vector<std::string> wrong = train;
  wrong.insert(wrong.end(), {"--n_layer", "3", "--checkpoint_dir", dir + "/ck_wrong"});
  wrong.insert(wrong.begin(), binary());
  ProcResult w = run(wrong, {}, 60);
  EXPECT_EQ(w.exit_code, 2) << w.output;
  EXPECT_FALSE(lines_with(w.output, "--n_layer=3 differs from the 2 of --init_from_hf's config.json").empty())
      << w.output;
}
