#include "train/deterministic.h"

#include <cstdlib>
#include <string>

#include <ATen/Context.h>

#include "util/env.h"
#include "util/error.h"

namespace ddptrain {

namespace {

// cuBLAS repeats its results only with one of these workspace configurations (LibTorch
// refuses a GEMM under deterministic algorithms without one).
constexpr const char* kCublasWorkspaceVar = "CUBLAS_WORKSPACE_CONFIG";
constexpr const char* kReproducibleWorkspace = ":4096:8";
constexpr const char* kSmallReproducibleWorkspace = ":16:8";

}  // namespace

void use_deterministic_algorithms() {
  const std::optional<std::string> workspace = env::get(kCublasWorkspaceVar);
  if (!workspace) {
    ::setenv(kCublasWorkspaceVar, kReproducibleWorkspace, 1);  // read at the first GEMM
  } else {
    DDP_USAGE_CHECK(*workspace == kReproducibleWorkspace || *workspace == kSmallReproducibleWorkspace,
                    "deterministic algorithms: ", kCublasWorkspaceVar, "='", *workspace,
                    "' is not one of cuBLAS's reproducible workspace configurations; unset it (ddptrain then "
                    "sets ",
                    kReproducibleWorkspace, ") or set ", kReproducibleWorkspace, " or ",
                    kSmallReproducibleWorkspace);
  }
  auto& ctx = at::globalContext();
  ctx.setDeterministicAlgorithms(true, /*warn_only=*/false);  // warn-only would keep cuDNN's attention
  ctx.setDeterministicCuDNN(true);
  ctx.setBenchmarkCuDNN(false);
}

bool deterministic_algorithms() { return at::globalContext().deterministicAlgorithms(); }

}  // namespace ddptrain
