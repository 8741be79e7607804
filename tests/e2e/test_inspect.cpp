// `ddptrain inspect model`: MiniResNet's layer table, parameters and FLOPs per sample (with
// --image_size and without, the dataset's, as train takes it), and another model's flags
// refused rather than left out of the description.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "e2e_helpers.h"
#include "proc.h"

using namespace ddptrain::e2e;

TEST(Inspect, ModelGivesMiniResNetsTableAndRefusesAnotherModelsFlags) {
  ProcResult m = run({binary(), "inspect", "model", "--width", "0.125", "--image_size", "8"}, {}, 60);
  ASSERT_EQ(m.exit_code, 0) << m.output;
  EXPECT_NE(m.output.find("forward FLOPs per sample: 847488"), std::string::npos) << m.output;
  EXPECT_NE(m.output.find("training FLOPs per sample (3 x forward): 2542464"), std::string::npos) << m.output;
  EXPECT_NE(m.output.find("stages.2.shortcut.0"), std::string::npos) << m.output;
  // Without --image_size: the dataset's (synthetic's 32), as train takes it (was: exit 2).
  ProcResult plain = run({binary(), "inspect", "model", "--width", "0.125"}, {}, 60);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_NE(plain.output.find("forward FLOPs per sample: "), std::string::npos) << plain.output;
  // A flag of another model is refused, not silently left out of the description.
  for (std::vector<std::string> other : {std::vector<std::string>{"--model", "gpt", "--image_size", "64"},
                                         {"--model", "llama", "--width", "2"},
                                         {"--n_layer", "4"},
                                         {"--model", "gpt", "--n_kv_head", "1"}}) {
    other.insert(other.begin(), {binary(), "inspect", "model"});
    ProcResult r = run(other, {}, 60);
    EXPECT_EQ(r.exit_code, 2) << other[4] << " " << r.output;
    EXPECT_NE(r.output.find("does not apply to --model"), std::string::npos) << r.output;
  }
  // A size train refuses is refused here too (a negative one was the preset's).
  for (const char* model : {"gpt", "llama"}) {
    ProcResult r = run({binary(), "inspect", "model", "--model", model, "--n_layer", "-4"}, {}, 60);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("--n_layer"), std::string::npos) << r.output;
  }
}
