#include "train/vector_math_first_calls.h"

#include <ATen/ATen.h>

namespace ddptrain {

void make_first_vector_math_calls() {
  at::NoGradGuard no_grad;
  for (const auto dtype : {at::kFloat, at::kDouble}) {
    // 1,024 elements: one thread's work (ATen splits these kernels from 2,048 elements), and
    // enough for MKL's vector code. Values inside every function's domain (acos, erfinv).
    const at::Tensor x = at::full({1024}, 0.5, at::TensorOptions().dtype(dtype));
    using Unary = at::Tensor (*)(const at::Tensor&);
    const Unary functions[] = {at::acos,   at::asin, at::atan, at::cos,   at::erf,  at::erfc,
                               at::erfinv, at::exp,  at::log,  at::log10, at::log2, at::sin,
                               at::sqrt,   at::tan,  at::tanh, at::trunc};
    for (const Unary f : functions) (void)f(x);
  }
}

}  // namespace ddptrain
