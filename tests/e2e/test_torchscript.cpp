// A module scripted in Python, trained by `ddptrain train --model torchscript` (#14, first
// part): world 2 trains it from the file's weights, model.pt loads back into the Python
// module, and bad inputs are clear usage errors.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

#include "e2e_helpers.h"
#include "proc.h"

using namespace ddptrain::e2e;

namespace {

std::vector<std::string> script_train(const std::string& dir, const std::string& model_path,
                                      std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"train", "--model", "torchscript", "--model_path", model_path, "--dataset_size", "64",
                                "--image_size", "8", "--batch_size", "8", "--num_workers", "0", "--epochs", "1",
                                "--max_steps", "3", "--no-use_amp", "--log_interval", "1", "--eval_every", "0",
                                "--checkpoint_dir", dir + "/ck", "--metrics_file", dir + "/m.jsonl"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::vector<std::string> with_binary(std::vector<std::string> args) {
  args.insert(args.begin(), binary());
  return args;
}

}  // namespace

TEST(TorchScript, AScriptedModuleTrainsAtWorldTwoAndItsWeightsGoBackToPython) {
  const std::string dir = fresh_dir("torchscript");
  const std::string py = source_dir() + "/tests/python/script_model.py";
  ProcResult saved = run({python(), py, "save", dir + "/net.pt"}, {}, 120);
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  ProcResult r = run(launch(2, free_port(), script_train(dir, dir + "/net.pt")), {}, 180);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto records = read_jsonl(dir + "/m.jsonl");
  int steps = 0;
  for (const auto& rec : records)
    if (rec.at("kind") == "step") {
      ++steps;
      EXPECT_TRUE(std::isfinite(rec.at("loss").get<double>())) << rec.dump();
    }
  EXPECT_EQ(steps, 3);
  const auto fp = fingerprints(r.output);
  ASSERT_EQ(fp.size(), 2u) << r.output;
  EXPECT_EQ(fp.at(0), fp.at(1)) << "the replicas diverged";
  ProcResult back = run({python(), py, "load_weights", dir + "/ck/step_00000003/model.pt"}, {}, 120);
  EXPECT_EQ(back.exit_code, 0) << back.output;
  EXPECT_NE(back.output.find("LOADED 8 tensors"), std::string::npos) << back.output;
  // Trained from the file's weights, not re-initialised: one step at a negligible lr keeps them.
  ProcResult tiny = run(with_binary(script_train(dir + "/tiny", dir + "/net.pt", {"--max_steps", "1", "--lr", "1e-30"})),
                        {}, 120);
  ASSERT_EQ(tiny.exit_code, 0) << tiny.output;
  ProcResult same = run({python(), py, "same", dir + "/net.pt", dir + "/tiny/ck/step_00000001/model.pt"}, {}, 120);
  EXPECT_EQ(same.exit_code, 0) << same.output;
}

TEST(TorchScript, BadInputsAreUsageErrors) {
  const std::string dir = fresh_dir("torchscript_bad");
  {
    std::ofstream(dir + "/not_an_archive.pt") << "hello";
  }
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {script_train(dir, dir + "/missing.pt"), "is not a file"},
      {script_train(dir, dir + "/not_an_archive.pt"), "is not a TorchScript archive this LibTorch"},
      {{"train", "--model", "torchscript"}, "--model torchscript needs --model_path FILE"},
      {script_train(dir, dir + "/missing.pt", {"--sync_bn"}), "--sync_bn cannot replace a scripted module's BatchNorm"},
      {{"train", "--model_path", dir + "/x.pt"}, "--model_path applies to --model torchscript"},
  };
  for (const auto& [args, expected] : cases) {
    std::vector<std::string> a = {binary()};
    a.insert(a.end(), args.begin(), args.end());
    ProcResult r = run(a, {}, 60);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(expected), std::string::npos) << expected << "\n" << r.output;
  }
}
