// FNV-1a, 64 bits: the project's one byte hash, the same on every rank, machine and run
// (std::hash need not be): fingerprints of states, run identities, reports the ranks compare.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace ddptrain {

inline constexpr uint64_t kFnvOffset = 1469598103934665603ull, kFnvPrime = 1099511628211ull;

/// Folds n bytes into h (start from kFnvOffset; fold on to hash several pieces as one).
inline uint64_t fnv1a(const void* data, size_t n, uint64_t h = kFnvOffset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}
inline uint64_t fnv1a(std::string_view s, uint64_t h = kFnvOffset) { return fnv1a(s.data(), s.size(), h); }

/// 16 hex digits.
inline std::string hex16(uint64_t v) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(v));
  return hex;
}

}  // namespace ddptrain
