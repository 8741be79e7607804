#include "obs/memory.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/version.h>

#ifdef USE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace ddptrain {
namespace {

// Each block carries its size in a 64-byte header (keeping LibTorch's 64-byte alignment), so
// the raw deleter needs no lookup and raw_allocate() keeps working.
constexpr size_t kHeader = 64;

std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};

void counted_free(void* p) {
  if (p == nullptr) return;
  char* base = static_cast<char*>(p) - kHeader;
  size_t n = 0;
  std::memcpy(&n, base, sizeof(n));
  g_current.fetch_sub(static_cast<int64_t>(n), std::memory_order_relaxed);
  c10::free_cpu(base);
}

class CountingCPUAllocator final : public c10::Allocator {
 public:
#if TORCH_VERSION_MAJOR >= 2
  c10::DataPtr allocate(size_t n) override {
#else
  c10::DataPtr allocate(size_t n) const override {
#endif
    char* base = static_cast<char*>(c10::alloc_cpu(n + kHeader));
    std::memcpy(base, &n, sizeof(n));
    const int64_t now =
        g_current.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed) + static_cast<int64_t>(n);
    int64_t peak = g_peak.load(std::memory_order_relaxed);
    while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    void* p = base + kHeader;
    return {p, p, &counted_free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &counted_free; }
#if TORCH_VERSION_MAJOR >= 2
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
#endif
};

}  // namespace

void install_cpu_memory_accounting() {
  static CountingCPUAllocator allocator;  // lives as long as the process, as LibTorch's own
  if (c10::GetCPUAllocator() != &allocator) c10::SetCPUAllocator(&allocator, /*priority=*/10);
}

bool keep_cpu_heap(int64_t keep_bytes) {
#if defined(__GLIBC__)
  if (keep_bytes <= 0) return false;
  // Order matters little, but both must be set: setting either turns glibc's dynamic
  // thresholds off, and a fixed 128 KiB mmap threshold would page-fault every large tensor.
  constexpr int kMmapCeiling = 32 << 20;
  const int trim = static_cast<int>(std::min<int64_t>(keep_bytes, std::numeric_limits<int>::max()));
  return mallopt(M_MMAP_THRESHOLD, kMmapCeiling) == 1 && mallopt(M_TRIM_THRESHOLD, trim) == 1;
#else
  (void)keep_bytes;
  return false;
#endif
}

bool lean_cpu_heap() {
#if defined(__GLIBC__)
  return mallopt(M_MMAP_THRESHOLD, 1 << 20) == 1;  // fixed: the dynamic policy is off
#else
  return false;
#endif
}

MemoryStats memory_stats(c10::Device device) {
#ifdef USE_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    const auto& a = stats.allocated_bytes[0];  // StatType::AGGREGATE
    return {a.current, a.peak};
  }
#endif
  if (device.is_cpu() && c10::GetCPUAllocator()->raw_deleter() == &counted_free)
    return {g_current.load(), g_peak.load()};
  return {};
}

void reset_peak_memory(c10::Device device) {
#ifdef USE_CUDA
  if (device.is_cuda()) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
    return;
  }
#endif
  if (device.is_cpu()) g_peak.store(g_current.load());
}

int64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // "VmHWM:   1234 kB"
  return -1;
}

}  // namespace ddptrain
