// Self-contained SVG line charts (no dependency): `ddptrain plot` draws a run's metrics file
// as a 2x2 grid of panels (loss, accuracy, samples/s, MFU over optimizer steps); several runs
// are overlaid in distinct colours with a legend, for comparison.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ddptrain {

struct Line {
  std::string label;                          // legend text, e.g. "run-a train"
  std::vector<std::pair<double, double>> xy;  // (step, value)
  int color = 0;                              // palette index (one per run)
  bool dashed = false;                        // e.g. evaluation vs training
};

struct Panel {
  std::string title;
  std::vector<Line> lines;
};

/// Tick values at "nice" steps (1, 2 or 5 times a power of ten) from lo to hi, about
/// `target` of them; an integer axis (optimizer steps) never gets a step below 1.
std::vector<double> nice_ticks(double lo, double hi, int target, bool integer_axis);

/// An SVG document with the panels in a grid of `columns`.
std::string render_svg(const std::vector<Panel>& panels, int columns = 2);

}  // namespace ddptrain
