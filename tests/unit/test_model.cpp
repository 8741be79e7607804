// MiniResNet: parameter count, state_dict keys in Python's order, and initial weights equal
// to Python's after manual_seed(42) (digests in tests/golden/model_seed42.txt).
#include <gtest/gtest.h>

#include <cmath>

#include "checkpoint/python_pickle.h"
#include "golden.h"
#include "models/mini_resnet.h"

using namespace ddptrain;

TEST(Model, DefaultParameterCount) {
  MiniResNet m(MiniResNetOptions{});
  EXPECT_EQ(count_parameters(*m), 2777674);
}

TEST(Model, ForwardShape) {
  MiniResNet m(MiniResNetOptions{1, 10, 0.25});
  auto y = m->forward(torch::randn({2, 1, 28, 28}));
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 10}));
}

TEST(Model, InitialWeightsAndKeysEqualPython) {
  auto lines = testing_golden::read_lines("model_seed42.txt");
  ASSERT_FALSE(lines.empty()) << "golden file missing";
  size_t li = 0;
  for (double width : {1.0, 0.25}) {
    torch::manual_seed(42);
    MiniResNet m(MiniResNetOptions{3, 10, width});
    NamedTensors sd = state_dict(*m);
    for (const auto& [key, t] : sd) {
      ASSERT_LT(li, lines.size());
      std::istringstream in(lines[li++]);
      double w;
      std::string gkey, shape;
      std::vector<double> d(4);
      in >> w >> gkey >> shape >> d[0] >> d[1] >> d[2] >> d[3];
      ASSERT_EQ(w, width);
      ASSERT_EQ(key, gkey) << "state_dict key order differs from Python";
      auto mine = testing_golden::digest(t);
      for (int k = 0; k < 4; ++k) {
        double tol = k < 2 ? 1e-9 * (1.0 + std::abs(d[static_cast<size_t>(k)])) : 0.0;
        EXPECT_NEAR(mine[static_cast<size_t>(k)], d[static_cast<size_t>(k)], tol) << key << " digest " << k;
      }
    }
  }
  EXPECT_EQ(li, lines.size()) << "Python has more state_dict entries";
}
