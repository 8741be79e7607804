// Note [Deterministic GPU runs]
// On the CPU a run is bitwise the same for the same seed, with --deterministic or without it
// (the CPU kernels are deterministic). The pairs of the GPU check's rehearsal that parted on
// CPUs (stop 46's default pair, stop 55's pair with the flag) parted at MKL's first parallel
// call of a vector math function, a race that serial first calls avoid: ddptrain's commands and
// the Trainer make them, a library program running such functions before its Trainer makes them
// first (Note [The first parallel call of a vector math function]). On a GPU the default is the
// fastest kernels, and one of them is not:
// cuDNN's attention (what SDPA picks for GPT and Llama on sm90), whose backward accumulates
// dQ in an order that changes from run to run. --deterministic (ProgramOptions::deterministic;
// use_deterministic_algorithms for a program of its own) asks LibTorch for deterministic
// algorithms only: SDPA then skips cuDNN and takes flash attention with its deterministic
// backward, cuDNN convolutions take deterministic algorithms and no autotuning, and cuBLAS
// gets the workspace configuration its reproducibility needs (CUBLAS_WORKSPACE_CONFIG=
// :4096:8, set before the first GEMM; a value of the user's that is not one of the two
// reproducible ones is refused). An op with no deterministic CUDA kernel stops the run with
// LibTorch's error naming it, rather than running one silently (none on GPT's, Llama's or
// MiniResNet's path: ATen's adaptive_avg_pool2d to 1x1 is a mean). It is process-wide state
// (LibTorch's global context), so it is the program's to set, once, before any CUDA work:
// LibTorch reads CUBLAS_WORKSPACE_CONFIG at the process's first GEMM, and every GEMM after a
// late call fails. The run record in the metrics says whether it is on ("deterministic_algorithms").
// ddptrain's own kernels are deterministic either way (fixed reduction orders, no atomics; the
// cuBLASLt epilogues as cuBLAS is: the same GPU model, one stream); their workspaces come from
// the caching allocator, not at::empty, which fills what it allocates under deterministic
// algorithms. What it costs, and whether a default run repeats bitwise, the GPU check measures
// (gpt_deterministic_1/2 against gpt_padded_1/2: docs/gpu.md).
#pragma once

namespace ddptrain {

/// Deterministic algorithms only, from here on in this process (Note [Deterministic GPU runs]).
/// Call it before any CUDA work (before the first GEMM, or every GEMM fails). UsageError where
/// CUBLAS_WORKSPACE_CONFIG is set to a value with which cuBLAS does not repeat its results.
void use_deterministic_algorithms();

/// Whether LibTorch runs deterministic algorithms only (what use_deterministic_algorithms set).
bool deterministic_algorithms();

}  // namespace ddptrain
