// Training itself, pinned: the per-step losses of two tiny runs (one process; two ranks with
// accumulation) equal the ones recorded in tests/golden/step_losses.txt, so a refactor of the
// trainer that changes what is trained fails here (#13).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "e2e_helpers.h"
#include "proc.h"

using namespace ddptrain::e2e;

namespace {

std::map<std::string, std::vector<double>> golden_losses() {
  std::map<std::string, std::vector<double>> out;
  std::ifstream in(source_dir() + "/tests/golden/step_losses.txt");
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name;
    fields >> name;
    for (double v; fields >> v;) out[name].push_back(v);
  }
  return out;
}

}  // namespace

TEST(GoldenLosses, TinyRunsTrainAsRecorded) {
  const auto golden = golden_losses();
  ASSERT_EQ(golden.size(), 2u) << "tests/golden/step_losses.txt";
  const std::vector<std::string> common = {
      "--dataset_size", "256", "--image_size", "8",           "--width", "0.125", "--batch_size",   "16",
      "--num_workers",  "1",   "--epochs",     "1",           "--lr",    "0.05",  "--log_interval", "1",
      "--threads",      "1",   "--no-use_amp", "--max_steps", "8"};
  for (const auto& [name, want] : golden) {
    const std::string dir = fresh_dir("golden_" + name);
    std::vector<std::string> argv = {binary()};
    if (name == "w2_accum2")
      argv.insert(argv.end(),
                  {"launch", "--nproc_per_node", "2", "--master_port", std::to_string(free_port())});
    argv.push_back("train");
    argv.insert(argv.end(), common.begin(), common.end());
    argv.insert(argv.end(), {"--checkpoint_dir", dir, "--metrics_file", dir + "/m.jsonl"});
    if (name == "w2_accum2") argv.insert(argv.end(), {"--grad_accum_steps", "2"});
    ProcResult r = run(argv, {}, 300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::vector<double> got = step_values(dir + "/m.jsonl", "loss");
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-4 * std::fabs(want[i])) << name << " step " << i + 1;
  }
}
