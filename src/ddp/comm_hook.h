// CommHook: how DDP's buckets travel in the all-reduce, as they are or compressed to 16 bits
// (PyTorch's fp16_compress_hook / bf16_compress_hook; --ddp_comm_hook). The enum belongs to
// ddp/; its words are config/'s (config/choices.h).
#pragma once

namespace ddptrain {

enum class CommHook { kNone, kFp16, kBf16 };

}  // namespace ddptrain
