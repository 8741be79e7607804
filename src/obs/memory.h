// Peak memory per rank. CUDA: the caching allocator's peak of allocated bytes. CPU:
// LibTorch's CPU allocator is wrapped by a counting one that keeps the bytes currently
// allocated and their peak (Note [CPU memory accounting]: the allocator is process-wide in
// LibTorch, so this is the one piece of process state we install; it is installed once at
// start by the train command and only counts, it changes no allocation).
#pragma once

#include <cstdint>

#include <c10/core/Device.h>

namespace ddptrain {

/// Installs the counting CPU allocator (idempotent). Tensors allocated before are not counted.
void install_cpu_memory_accounting();

struct MemoryStats {
  int64_t current_bytes = -1;  // -1: not measured on this device
  int64_t peak_bytes = -1;
};

/// Allocated bytes now and at the peak since the last reset, on the device.
MemoryStats memory_stats(c10::Device device);

/// Starts a new peak (e.g. per epoch).
void reset_peak_memory(c10::Device device);

}  // namespace ddptrain
