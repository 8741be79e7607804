#include "train/vector_math_first_calls.h"

#include <ATen/ATen.h>

#include <mutex>

namespace ddptrain {

const std::vector<std::pair<const char*, at::Tensor (*)(const at::Tensor&)>>& vector_math_functions() {
  static const std::vector<std::pair<const char*, at::Tensor (*)(const at::Tensor&)>> functions = {
      {"acos", at::acos}, {"asin", at::asin},   {"atan", at::atan},     {"cos", at::cos},
      {"erf", at::erf},   {"erfc", at::erfc},   {"erfinv", at::erfinv}, {"exp", at::exp},
      {"log", at::log},   {"log10", at::log10}, {"log2", at::log2},     {"sin", at::sin},
      {"sqrt", at::sqrt}, {"tan", at::tan},     {"tanh", at::tanh},     {"trunc", at::trunc}};
  return functions;
}

void make_first_vector_math_calls() {
  // Once a process: Trainers of ranks that are threads (tests) would otherwise make these
  // first calls at the same moment, the race itself.
  static std::once_flag once;
  std::call_once(once, [] {
    at::NoGradGuard no_grad;
    for (const auto dtype : {at::kFloat, at::kDouble}) {
      // 1,024 elements: one thread's work (ATen splits these kernels above 2,048 elements), and
      // enough for MKL's vector code. Values inside every function's domain (acos, erfinv).
      const at::Tensor x = at::full({1024}, 0.5, at::TensorOptions().dtype(dtype));
      for (const auto& [name, f] : vector_math_functions()) (void)f(x);
      // ATen's logit calls MKL's vsLn/vdLn itself, splitting from a few elements: 8, serial.
      (void)at::logit(x.narrow(0, 0, 8));
    }
  });
}

}  // namespace ddptrain
