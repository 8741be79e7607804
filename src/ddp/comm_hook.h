// CommHook: how DDP's buckets travel in the all-reduce, as they are or compressed to 16 bits
// (PyTorch's fp16_compress_hook / bf16_compress_hook; --ddp_comm_hook), with its words
// (Note [Choices are enums], util/choices.h).
#pragma once

#include "util/choices.h"

namespace ddptrain {

enum class CommHook { kNone, kFp16, kBf16 };

inline const Choices<CommHook>& comm_hook_choices() {
  static const Choices<CommHook> c{
      {"none", CommHook::kNone}, {"fp16", CommHook::kFp16}, {"bf16", CommHook::kBf16}};
  return c;
}
inline const char* word(CommHook v) { return comm_hook_choices().word(v); }

}  // namespace ddptrain
