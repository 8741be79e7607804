// SplitMix64's finaliser: a bijective mix of 64 bits, the hash behind every per-sample random
// choice (Note [Augmentation is a pure function], data/augment.h).
#pragma once

#include <cstdint>

namespace ddptrain {

inline uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace ddptrain
