// Peak memory per rank. CUDA: the caching allocator's peak of allocated bytes. CPU:
// LibTorch's CPU allocator is wrapped by a counting one that keeps the bytes currently
// allocated and their peak (Note [CPU memory accounting]: the allocator is process-wide in
// LibTorch; it is installed once at start by the train command and only counts, it changes
// no allocation). The other process-wide setting, malloc's policy, is set there too (Note
// [CPU heap kept across steps]).
#pragma once

#include <cstdint>

#include <c10/core/Device.h>

namespace ddptrain {

/// Installs the counting CPU allocator (idempotent). Tensors allocated before are not counted.
void install_cpu_memory_accounting();

// Note [CPU heap kept across steps]
// A training step frees nearly all it allocated (activations, gradients of the previous
// step) and allocates the same again in the next. glibc's malloc returns the freed top of
// its heap to the OS once it exceeds the trim threshold (at most 64 MiB under its dynamic
// policy), so every step grew the heap again with brk and took a page fault for each fresh
// 4 KiB page: 16% of the CPU went to the kernel and a two-rank run lost 15-20% of its speed
// (Python processes mostly escape it: their own small objects pin the heap's top). We keep
// up to --cpu_heap_keep_mb of freed heap for the next step, and serve blocks up to 32 MiB
// (glibc's own ceiling for the dynamic policy) from the heap instead of fresh mmaps. The
// memory stays with the process, as with CUDA's caching allocator; 0 leaves glibc's policy.
// Under ZeRO (--zero_stage >= 1) the default is the opposite, because what a rank holds at its
// peak is the point there: ZeRO stage 3 gathers and frees a unit's parameters (tens of MiB)
// several times a step, and glibc's dynamic policy serves such blocks from a heap whose freed
// middle it never returns, so the resident set grew by the size of the sharding's savings
// (GPT n_embd 768 x 4 layers at world 4: 1.0 GiB resident at stage 3 as at stage 0, with
// tensors peaking at 352 vs 564 MiB). The lean heap mmaps every block of 1 MiB or more and
// returns it when freed (760 vs 964 MiB), at the cost of page faults.

/// Sets malloc's trim threshold to keep_bytes and its mmap threshold to 32 MiB (glibc only;
/// keep_bytes 0 changes nothing). Returns whether the policy was changed.
bool keep_cpu_heap(int64_t keep_bytes);
/// The lean heap: a fixed 1 MiB mmap threshold (glibc only). Returns whether it was set.
bool lean_cpu_heap();

struct MemoryStats {
  int64_t current_bytes = -1;  // -1: not measured on this device
  int64_t peak_bytes = -1;
};

/// Allocated bytes now and at the peak since the last reset, on the device.
MemoryStats memory_stats(c10::Device device);

/// The process's peak resident set size so far (VmHWM: every allocator, the loader's
/// threads and the libraries' own memory), in bytes; -1 where /proc is not readable.
int64_t peak_rss_bytes();

/// Starts a new peak (e.g. per epoch).
void reset_peak_memory(c10::Device device);

}  // namespace ddptrain
