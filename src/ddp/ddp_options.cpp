#include "ddp/ddp_options.h"

#include "util/error.h"
#include "util/strings.h"

namespace ddptrain {

namespace {

// A bucket's cap in bytes must be a whole number of at least one byte and fit a size_t: from
// a millionth of a MiB (1 byte) to 1 TiB.
constexpr double kMinBucketMb = 1.0 / (1 << 20), kMaxBucketMb = 1 << 20;

}  // namespace

void DdpOptions::validate() const {
  if (bucket_cap_mb && !(*bucket_cap_mb >= kMinBucketMb && *bucket_cap_mb <= kMaxBucketMb))
    throw OptionError({{&bucket_cap_mb, "ddp.bucket_cap_mb"}},
                      str("{0}=", *bucket_cap_mb, " must be in [", kMinBucketMb, ", ", kMaxBucketMb,
                          "] MiB; pass e.g. {0:25}, or auto (unset): chosen from the link"));
  if (!(first_bucket_mb >= kMinBucketMb && first_bucket_mb <= kMaxBucketMb))
    throw OptionError({{&first_bucket_mb, "ddp.first_bucket_mb"}},
                      str("{0}=", first_bucket_mb, " must be in [", kMinBucketMb, ", ", kMaxBucketMb,
                          "] MiB; pass e.g. {0:1}"));
}

void ZeroOptions::validate(const DdpOptions& ddp) const {
  if (stage < 0 || stage > 3)
    throw OptionError({{&stage, "zero.stage"}},
                      str("{0}=", stage,
                          " is not available: 0 (DDP), 1 (optimizer state sharded), 2 (gradients too) or 3 "
                          "(parameters too)"));
  if (stage >= 2 && (ddp.comm_hook != CommHook::kNone || ddp.gradient_as_bucket_view))
    throw OptionError({{&stage, "zero.stage"},
                       {&ddp.comm_hook, "ddp.comm_hook"},
                       {&ddp.gradient_as_bucket_view, "ddp.gradient_as_bucket_view"}},
                      str("{0} ", stage,
                          " keeps only this rank's gradient shard: it does not combine with {1} or {2}; drop "
                          "those, or use {0:1}"));
}

}  // namespace ddptrain
