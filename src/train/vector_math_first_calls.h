// Note [The first parallel call of a vector math function]
// LibTorch's CPU kernels for sqrt, exp, log, tanh, erf and their kin call Intel MKL's vector
// math (VML) where LibTorch has MKL (pip's x86 builds; Debian's 1.13 has none), each thread on
// its own part of a tensor of more than 2,048 elements. MKL picks each function's code at its
// first call in the process, and where that first call is a parallel one, racing threads
// can compute their part with a less accurate code path (relative errors up to about 2^-12,
// the same values each time it happens). Measured on an Intel Xeon with AMX (2 cores, pip's
// torch 2.11 and 2.15), the GPU check rehearsal's GPT (debug, bf16, AdamW), 300 runs 4 at a
// time with 2 intra-op threads each: 4 to 11 runs parted from the others at step 2 in each
// configuration tried (with and without --deterministic, with no loader thread, on either
// torch). Each time the first AdamW step had computed exp_avg_sq.sqrt() of wte (16,384
// elements: the process's first sqrt, in two halves) with the second thread's half off; a
// copy of that sqrt made first in the step was off in 7 of 300 runs and the step then never;
// a serial first call of sqrt: 0 of 300. So the program makes one serial call of each such
// function, of each floating dtype, before any parallel one: the train and eval commands once
// they set the intra-op threads, and the Trainer when it is constructed (a library program
// that builds a model with these functions calls it itself, first). With it: 0 of 300 runs
// parted, against 6 of 300 for the build before it (bench/repeats_under_load.sh).
// The calls take microseconds and change nothing but which code MKL runs.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>
#include <vector>

namespace ddptrain {

/// Every math function ATen may run in MKL's vector math (ATen/cpu/vml.h's list), by name.
const std::vector<std::pair<const char*, at::Tensor (*)(const at::Tensor&)>>& vector_math_functions();

/// One call, in this thread and on fewer elements than ATen's kernels split among threads, of
/// every math function ATen may run in MKL's vector math, for float and double: MKL then picks
/// their code without a race (Note [The first parallel call of a vector math function]). Once
/// a process: later calls, and calls from other threads meanwhile, wait for the first and return.
void make_first_vector_math_calls();

}  // namespace ddptrain
