// `ddptrain plot`'s axes (#18 item 10): ticks at "nice" values, each label where its value is.
#include <gtest/gtest.h>

#include "obs/svg_plot.h"

using namespace ddptrain;

namespace {

void expect_ticks(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "tick " << i;
}

}  // namespace

TEST(Plot, TicksAreNiceNumbersAndStepsAreWhole) {
  expect_ticks(nice_ticks(2, 8, 5, true), {2, 3, 4, 5, 6, 7, 8});  // was "2 4 5 7 8", off their values
  expect_ticks(nice_ticks(8, 9, 5, true), {8, 9});                 // was "8 8 9 9 9"
  expect_ticks(nice_ticks(0, 1, 4, false), {0, 0.2, 0.4, 0.6, 0.8, 1.0});
  expect_ticks(nice_ticks(0.013, 0.047, 4, false), {0.02, 0.03, 0.04});
  expect_ticks(nice_ticks(0, 2000, 5, true), {0, 500, 1000, 1500, 2000});
  expect_ticks(nice_ticks(-1, 1, 4, false), {-1, -0.5, 0, 0.5, 1});
}

TEST(Plot, EachStepLabelSitsAtItsValue) {
  Panel p{"loss", {Line{"train", {{2, 0.0}, {8, 1.0}}, 0, false}}};
  const std::string svg = render_svg({p}, 1);
  // Plot area: x from 62 to 480 - 16 = 464 for steps 2..8; step 5 is half way, at 263.
  EXPECT_NE(svg.find("<text x=\"263\" y=\"274\" text-anchor=\"middle\" font-size=\"10\">5</text>"),
            std::string::npos)
      << svg;
  EXPECT_EQ(svg.find(">4.5<"), std::string::npos) << "a fractional step label";
}
