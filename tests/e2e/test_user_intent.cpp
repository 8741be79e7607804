// End-to-end tests of issue #18, "a run is exactly what the user asked for": each dataset
// reads its own files, flags the model or optimizer has no use for are refused, and a
// finished run resumed trains nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "e2e_helpers.h"
#include "proc.h"

using namespace ddptrain::e2e;
namespace fs = std::filesystem;

namespace {

std::set<std::string> entries(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

int records_of_kind(const std::string& metrics, const std::string& kind) {
  std::ifstream in(metrics);
  int n = 0;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && nlohmann::json::parse(line).value("kind", "") == kind) ++n;
  return n;
}

}  // namespace

// Item 1: --data_dir had one default, Fashion-MNIST's folder, for every dataset: --dataset
// mnist trained on Fashion-MNIST. Now only fashion-mnist has a default; the others name
// --data_dir and the files they need. Item "silently ignored": flags the model or optimizer
// does not use are refused by name.
TEST(UserIntent, EachDatasetReadsItsOwnFilesAndUnusedFlagsAreRefused) {
  const struct {
    std::vector<std::string> args;
    std::string expect;
  } cases[] = {
      {{"train", "--dataset", "mnist", "--max_steps", "1"}, "--dataset mnist reads MNIST's IDX files"},
      {{"train", "--dataset", "cifar10", "--max_steps", "1"}, "--dataset cifar10 reads CIFAR-10's binary version"},
      {{"train", "--dataset", "tensors", "--max_steps", "1"}, "--dataset tensors reads train.pt"},
      {{"inspect", "loader", "--dataset", "mnist"}, "from --data_dir, which has no default for it"},
      {{"train", "--dataset", "mnist", "--data_dir", "/no/such"}, "--data_dir='/no/such' has no train-images-idx3-ubyte(.gz); point --data_dir at MNIST's IDX files"},
      {{"train", "--model", "gpt", "--dataset", "tokens", "--width", "0.5"}, "--width=0.5 applies to mini_resnet"},
      {{"train", "--model", "gpt", "--dataset", "tokens", "--sync_bn"}, "--sync_bn applies to models with BatchNorm"},
      {{"train", "--optimizer", "adamw", "--momentum", "0.5"}, "--momentum=0.5 applies to --optimizer sgd"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv = {binary()};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    ProcResult r = run(argv, {}, 60);
    EXPECT_EQ(r.exit_code, 2) << c.expect << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << "expected: " << c.expect << "\ngot: " << r.output;
  }
}

// Item 4: resuming a run that already reached --max_steps trained and saved one more step
// (each rerun or restart another). Now: nothing to train, exit 0, no new checkpoint, no steps;
// the same for a run that finished all its --epochs.
TEST(UserIntent, ResumingAFinishedRunTrainsNothingAndSavesNothing) {
  const std::string ckpt = fresh_dir("finished");
  auto train = [&](const std::string& metrics, std::vector<std::string> extra) {
    extra.insert(extra.end(), {"--metrics_file", metrics});
    std::vector<std::string> argv = tiny_train(ckpt, std::move(extra));
    argv.insert(argv.begin(), binary());
    return run(argv, {}, 300);
  };
  // A rerun must leave the checkpoint directory as it was and write no step record.
  auto expect_nothing_trained = [&](const std::string& name, std::vector<std::string> extra) {
    const auto before = entries(ckpt);
    const std::string metrics = fresh_dir("finished_metrics") + "/" + name + ".jsonl";
    ProcResult r = train(metrics, std::move(extra));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(records_of_kind(metrics, "step"), 0) << r.output;
    EXPECT_EQ(entries(ckpt), before) << r.output;
  };
  const std::string scratch = fresh_dir("finished_scratch");
  ProcResult first = train(scratch + "/first.jsonl", {"--max_steps", "3"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_TRUE(entries(ckpt).count("step_00000003")) << first.output;
  expect_nothing_trained("max_steps", {"--max_steps", "3", "--resume_from", "auto"});
  // Without --max_steps the run goes on to the end of its 2 epochs ...
  ProcResult rest = train(scratch + "/rest.jsonl", {"--resume_from", "auto"});
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  EXPECT_GT(records_of_kind(scratch + "/rest.jsonl", "step"), 0) << rest.output;
  ASSERT_TRUE(entries(ckpt).count("epoch_0002")) << rest.output;
  // ... after which it has nothing left either.
  expect_nothing_trained("epochs", {"--resume_from", "auto"});
}
