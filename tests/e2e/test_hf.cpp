// Hugging Face GPT-2 end to end (#31, GPT-2 part): `ddptrain train --init_from_hf DIR` takes a
// folder transformers saved (its sizes and weights) and trains it at world 2; `export --format
// hf` writes a folder transformers' from_pretrained loads with no missing, unexpected or
// mismatched tensor; eval of the checkpoint needs no folder; a size flag against the config is
// refused. The Llama family: a Qwen2 folder at world 2 under ZeRO-3 (below). Numerics (logits,
// loss, round trips) are the unit tests' (HfGpt2.*, HfLlama.*).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/required.h"
#include "e2e_helpers.h"
#include "proc.h"

using namespace ddptrain::e2e;
namespace fs = std::filesystem;

namespace {

bool has_transformers() { return run({python(), "-c", "import transformers"}, {}, 60).exit_code == 0; }

// A suite that requires transformers (tests/common/required.h) fails instead of skipping.
#define SKIP_OR_FAIL_WITHOUT_TRANSFORMERS()                                                              \
  if (!has_transformers()) {                                                                             \
    if (::ddptrain::testing_common::transformers_required())                                             \
      FAIL() << python()                                                                                 \
             << " has no transformers, which this suite requires (DDPTRAIN_REQUIRE_TRANSFORMERS=1)";     \
    GTEST_SKIP() << python()                                                                             \
                 << " has no transformers (scripts/install_deps.sh test installs it for pip's torches)"; \
  }

// nanoGPT's token file (uint16) of n tokens (i * 37 + offset) % 96, for the test models' 96-token
// vocabulary.
void write_tokens(const std::string& path, int n, int offset) {
  std::string bytes;
  for (int i = 0; i < n; ++i) {
    const auto tok = static_cast<uint16_t>((i * 37 + offset) % 96);
    bytes.append(reinterpret_cast<const char*>(&tok), 2);
  }
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace

TEST(HfGpt2, TrainsFromAHuggingFaceFolderAtWorld2AndExportsWhatTransformersLoads) {
  SKIP_OR_FAIL_WITHOUT_TRANSFORMERS();
  const std::string dir = fresh_dir("hf_e2e");
  ProcResult make = run({python(), source_dir() + "/tests/python/hf.py", "make", dir + "/gpt2"}, {}, 120);
  ASSERT_EQ(make.exit_code, 0) << make.output;
  // nanoGPT's token files (uint16) of the model's 96-token vocabulary: 64 windows to train, 8 to validate.
  for (const auto& [name, n] : {std::pair{"train.bin", 64 * 16 + 1}, std::pair{"val.bin", 8 * 16 + 1}})
    write_tokens(dir + "/" + name, n, n);
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
  // The folder's token ids (tests/python/hf.py: 93 and 94) back in the export's config.json;
  // export reset them for gpt (it wrote the vocabulary's last token, 95).
  const nlohmann::json exported = nlohmann::json::parse(read_text(dir + "/out/config.json"));
  EXPECT_EQ(exported.at("bos_token_id"), 93);
  EXPECT_EQ(exported.at("eos_token_id"), 94);
  // A resume with the same command (it reads the folder's config again, not its weights).
  std::vector<std::string> more = train;
  more.insert(more.end(), {"--resume_from", "auto", "--epochs", "2"});
  ProcResult r = run(launch(2, free_port(), more), {}, 300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(lines_with(r.output, "resuming from " + dir + "/ck/epoch_0001").empty()) << r.output;
  // The same with the checkpoint named, into another folder: the folder gives the sizes still.
  std::vector<std::string> named = train;
  named.insert(named.end(), {"--resume_from", dir + "/ck/epoch_0001", "--epochs", "2", "--checkpoint_dir",
                             dir + "/ck_named", "--metrics_file", dir + "/named.jsonl"});
  named.insert(named.begin(), binary());
  ProcResult n = run(named, {}, 300);
  EXPECT_EQ(n.exit_code, 0) << n.output;
  EXPECT_TRUE(fs::exists(dir + "/ck_named/epoch_0002/manifest.json")) << n.output;
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
  // The same in a --config file, at its default value (it gave way to the folder's gelu_new).
  std::ofstream(dir + "/exact_gelu.toml") << "gpt_activation = \"gelu\"\n";
  std::vector<std::string> in_config = train;
  in_config.insert(in_config.end(),
                   {"--config", dir + "/exact_gelu.toml", "--checkpoint_dir", dir + "/ck_toml"});
  in_config.insert(in_config.begin(), binary());
  ProcResult c = run(in_config, {}, 60);
  EXPECT_EQ(c.exit_code, 2) << c.output;
  EXPECT_FALSE(lines_with(c.output, "--gpt_activation=gelu differs from the gelu_tanh").empty()) << c.output;
  // A config.json that says more layers than its files hold (one copied from a larger model):
  // exit 2 naming the missing tensor before the model is built (it was built and filled with
  // random weights first: a 7B config's OOM, not an error).
  fs::create_directories(dir + "/deeper");
  for (const auto& e : fs::directory_iterator(dir + "/gpt2"))
    fs::copy(e.path(), dir + "/deeper/" + e.path().filename().string());
  nlohmann::json config = nlohmann::json::parse(read_text(dir + "/deeper/config.json"));
  config["n_layer"] = 3;
  std::ofstream(dir + "/deeper/config.json") << config.dump();
  std::vector<std::string> deeper = train;
  deeper.insert(deeper.end(), {"--init_from_hf", dir + "/deeper", "--checkpoint_dir", dir + "/ck_deeper"});
  deeper.insert(deeper.begin(), binary());
  ProcResult d = run(deeper, {}, 60);
  EXPECT_EQ(d.exit_code, 2) << d.output;
  EXPECT_FALSE(lines_with(d.output, "tensor 'transformer.h.2.").empty()) << d.output;
  EXPECT_TRUE(lines_with(d.output, "optimizer adamw").empty()) << "the model was built first: " << d.output;
}

// The Llama family end to end: a Qwen2 folder (grouped-query attention, q/k/v biases, tied)
// trained with no --model (the config's model_type picks llama) at world 2 under ZeRO-3, in a
// window shorter than the model's positions; the export is Qwen2 again, with the model's
// max_position_embeddings, and transformers loads it.
TEST(HfLlama, TrainsAQwen2FolderAtWorld2UnderZero3AndExportsWhatTransformersLoads) {
  SKIP_OR_FAIL_WITHOUT_TRANSFORMERS();
  const std::string dir = fresh_dir("hf_llama_e2e");
  ProcResult make =
      run({python(), source_dir() + "/tests/python/hf.py", "make-arch", "qwen2", dir + "/qwen2"}, {}, 120);
  ASSERT_EQ(make.exit_code, 0) << make.output;
  write_tokens(dir + "/train.bin", 64 * 8 + 1, 5);
  const std::vector<std::string> train = {"train",
                                          "--no-use_amp",  // two fresh runs compared bitwise
                                          "--init_from_hf",
                                          dir + "/qwen2",
                                          "--dataset",
                                          "token_shards",
                                          "--data_path",
                                          dir + "/train.bin",
                                          "--block_size",
                                          "8",
                                          "--batch_size",
                                          "4",
                                          "--epochs",
                                          "1",
                                          "--optimizer",
                                          "adamw",
                                          "--lr",
                                          "1e-3",
                                          "--zero_stage",
                                          "3",
                                          "--num_workers",
                                          "1",
                                          "--checkpoint_dir",
                                          dir + "/ck"};
  ProcResult t = run(launch(2, free_port(), train), {}, 300);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_FALSE(lines_with(t.output,
                          "llama (2 layers, 4 heads (2 key/value), 32 wide, MLP 48, block 8, vocab 96, "
                          "tied, q/k/v biases, rope theta 500)")
                   .empty())
      << t.output;
  const auto fp = fingerprints(t.output);
  EXPECT_EQ(fp.at(1), fp.at(0));
  // Note [Units sharded as built]: each layer was read from the folder into itself and sharded
  // as it was built; the run is the whole model's at stage 0, bitwise (as at world 2 for a
  // fresh model: Zero.StageThreeTrains*AsStageZero).
  EXPECT_EQ(count_of(t.output, "2 units sharded as they were built"), 1u) << t.output;
  std::vector<std::string> stage0 = train;
  stage0[stage0.size() - 5] = "0";  // --zero_stage
  stage0.back() = dir + "/ck0";
  ProcResult t0 = run(launch(2, free_port(), stage0), {}, 300);
  ASSERT_EQ(t0.exit_code, 0) << t0.output;
  EXPECT_EQ(fingerprints(t0.output).at(0), fp.at(0));
  ProcResult e = run({binary(), "export", "--checkpoint", dir + "/ck", "--format", "hf", "--out",
                      dir + "/out", "--dtype", "bf16"},
                     {}, 120);
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const std::string config = read_text(dir + "/out/config.json");
  EXPECT_NE(config.find("\"model_type\": \"qwen2\""), std::string::npos) << config;
  EXPECT_NE(config.find("\"max_position_embeddings\": 16"), std::string::npos) << config;
  ProcResult load = run(
      {python(), source_dir() + "/tests/python/hf.py", "logits", dir + "/out", "2", "16", dir + "/logits"},
      {}, 120);
  EXPECT_EQ(load.exit_code, 0) << load.output;
  EXPECT_NE(read_text(dir + "/logits.loss"), "");
  // The window must fit the model: longer than its positions is a usage error.
  std::vector<std::string> longer = train;
  longer[std::find(longer.begin(), longer.end(), "--block_size") - longer.begin() + 1] = "32";
  longer.back() = dir + "/ck_longer";
  longer.insert(longer.begin(), binary());
  ProcResult l = run(longer, {}, 60);
  EXPECT_EQ(l.exit_code, 2) << l.output;
  EXPECT_FALSE(lines_with(l.output, "--block_size=32 is longer than the model's --max_positions=16").empty())
      << l.output;
}

// The same Hugging Face folder trained 5 AdamW steps at world 2 by Python DDP (transformers'
// own model, torchrun, PyTorch's sampler: tests/python/hf_ddp.py) and by ddptrain: the same
// weights within 1e-5, for GPT-2, Llama (grouped-query attention, untied) and Qwen2 (q/k/v
// biases, tied); both moved away from the folder's weights. GPT-2's key bias is bounded only
// by how far two AdamW runs can part in 5 steps of lr, 1e-2 (script_model.py parts(): its
// gradient is zero up to rounding, which Adam steps on; 1.6e-6 on the EPYC, and 2.5e-4 under
// AVX2 in another test of the same bias): it is all but unchecked.
TEST(HfParity, FiveAdamWStepsAtWorld2EqualPythonDdpOnTheSameFolder) {
  SKIP_OR_FAIL_WITHOUT_TRANSFORMERS();
  const std::string dir = fresh_dir("hf_parity");
  write_tokens(dir + "/train.bin", 64 * 16 + 1, 1025);
  const std::string hf_py = source_dir() + "/tests/python/hf.py",
                    close_py = source_dir() + "/tests/python/script_model.py";
  for (const std::string arch : {"gpt2", "llama", "qwen2"}) {
    const std::string folder = dir + "/" + arch, ck = dir + "/ck_" + arch;
    ProcResult make =
        run(arch == "gpt2" ? std::vector<std::string>{python(), hf_py, "make", folder}
                           : std::vector<std::string>{python(), hf_py, "make-arch", arch, folder},
            {}, 120);
    ASSERT_EQ(make.exit_code, 0) << make.output;
    ProcResult ours = run(launch(2, free_port(),
                                 {"train",
                                  "--init_from_hf",
                                  folder,
                                  "--dataset",
                                  "token_shards",
                                  "--data_path",
                                  dir + "/train.bin",
                                  "--optimizer",
                                  "adamw",
                                  "--lr",
                                  "1e-3",
                                  "--weight_decay",
                                  "0.1",
                                  "--lr_schedule",
                                  "constant",
                                  "--batch_size",
                                  "4",
                                  "--max_steps",
                                  "5",
                                  "--threads",
                                  "1",
                                  "--no-use_amp",
                                  "--checkpoint_dir",
                                  ck}),
                          {}, 300);
    ASSERT_EQ(ours.exit_code, 0) << ours.output;
    // hf_ddp.py under torchrun at world 2: `steps` steps, the weights into `out` in ddptrain's names.
    const auto python_ddp = [&](const std::string& out, const std::string& steps) {
      return std::vector<std::string>{python(),
                                      source_dir() + "/tests/python/torchrun_wrapper.py",
                                      "--nproc_per_node",
                                      "2",
                                      "--master_addr",
                                      "127.0.0.1",
                                      "--master_port",
                                      std::to_string(free_port()),
                                      source_dir() + "/tests/python/hf_ddp.py",
                                      folder,
                                      dir + "/train.bin",
                                      out,
                                      "--steps",
                                      steps,
                                      "--batch_size",
                                      "4",
                                      "--lr",
                                      "1e-3",
                                      "--weight_decay",
                                      "0.1"};
    };
    ProcResult theirs =
        run(python_ddp(dir + "/python_" + arch + ".pt", "5"), {{"OMP_NUM_THREADS", "1"}}, 300);
    ASSERT_EQ(theirs.exit_code, 0) << theirs.output;
    const std::string trained = ck + "/step_00000005/model.pt";
    ProcResult close =
        run({python(), close_py, "close", dir + "/python_" + arch + ".pt", trained, "1e-5", "1e-2"}, {}, 120);
    EXPECT_EQ(close.exit_code, 0) << arch << ": " << close.output;
    std::printf("%s: ddptrain vs Python DDP after 5 AdamW steps: %s\n", arch.c_str(), close.output.c_str());
    // Not trivially equal: the weights moved (the folder's, in ddptrain's names, are not within 1e-5).
    ProcResult saved =
        run(python_ddp(dir + "/initial_" + arch + ".pt", "0"), {{"OMP_NUM_THREADS", "1"}}, 300);
    ASSERT_EQ(saved.exit_code, 0) << saved.output;
    ProcResult moved =
        run({python(), close_py, "close", dir + "/initial_" + arch + ".pt", trained, "1e-5"}, {}, 120);
    EXPECT_EQ(moved.exit_code, 1) << arch << ": training left the weights where they were: " << moved.output;
    EXPECT_NE(moved.output.find("DIFFERENT "), std::string::npos)
        << "not a comparison that differed: " << moved.output;
  }
}
