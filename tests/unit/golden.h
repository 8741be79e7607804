// Helpers to read the golden files made by tests/golden/make_golden.py (Python PyTorch).
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>

namespace ddptrain::testing_golden {

inline std::vector<std::string> read_lines(const std::string& name) {
  std::ifstream in(std::string(DDPTRAIN_SOURCE_DIR) + "/tests/golden/" + name);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) lines.push_back(l);
  return lines;
}

/// The same digest as reference.py's tensor_digest: sum, weighted sum, first, last.
inline std::vector<double> digest(const at::Tensor& t) {
  auto v = t.detach().reshape(-1).to(at::kDouble);
  auto w = at::remainder(at::arange(v.numel(), at::kDouble), 97) + 1;
  return {v.sum().item<double>(), (v * w).sum().item<double>(), v[0].item<double>(),
          v[v.numel() - 1].item<double>()};
}

}  // namespace ddptrain::testing_golden
