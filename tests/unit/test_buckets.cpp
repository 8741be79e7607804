// Bucket assignment is a pure function: reverse order, caps, dtype groups, determinism.
#include <gtest/gtest.h>

#include "ddp/bucket_assignment.h"
#include "ddp/bucket_size.h"
#include "ddp/shard_layout.h"

using namespace ddptrain;

TEST(Buckets, ReverseOrderWithCaps) {
  // Five float params of 100 floats = 400 bytes each; first cap 400, then 1000.
  std::vector<BucketParam> p(5, BucketParam{100, 4, "f32"});
  auto b = assign_buckets(p, 1000, 400);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0], (std::vector<size_t>{4}));
  EXPECT_EQ(b[1], (std::vector<size_t>{3, 2, 1}));
  EXPECT_EQ(b[2], (std::vector<size_t>{0}));
}

TEST(Buckets, OversizedParamGetsOwnBucket) {
  std::vector<BucketParam> p = {{10, 4, "f"}, {1000000, 4, "f"}, {10, 4, "f"}};
  auto b = assign_buckets(p, 1000, 1000);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0], (std::vector<size_t>{2, 1}));
  EXPECT_EQ(b[1], (std::vector<size_t>{0}));
}

TEST(Buckets, GroupsNeverMix) {
  std::vector<BucketParam> p = {{10, 4, "f32"}, {10, 2, "bf16"}, {10, 4, "f32"}, {10, 2, "bf16"}};
  auto b = assign_buckets(p, 1 << 20, 1 << 20);
  ASSERT_EQ(b.size(), 2u);
  for (const auto& bucket : b)
    for (size_t i : bucket) EXPECT_EQ(p[i].group, p[bucket[0]].group);
  size_t total = 0;
  for (const auto& bucket : b) total += bucket.size();
  EXPECT_EQ(total, 4u);
}

TEST(Buckets, EveryParamExactlyOnceAndDeterministic) {
  std::vector<BucketParam> p;
  for (int i = 0; i < 50; ++i) p.push_back({(i * 37) % 500 + 1, 4, i % 3 ? "a" : "b"});
  auto b1 = assign_buckets(p, 2000, 500);
  auto b2 = assign_buckets(p, 2000, 500);
  EXPECT_EQ(b1, b2);
  std::vector<int> seen(50, 0);
  for (const auto& bucket : b1)
    for (size_t i : bucket) seen[i]++;
  for (int s : seen) EXPECT_EQ(s, 1);
}

// Note [Bucket size from the link]: the cap is a pure function of the measured link, the
// gradient size and the backward time.
namespace {
constexpr double kMiB = 1 << 20;
constexpr int64_t kResNetGrad = static_cast<int64_t>(10.6 * kMiB);  // MiniResNet width 1.0, fp32
}  // namespace

TEST(BucketSize, ASlowLinkGetsSmallBucketsSoLittleWaitsAfterBackward) {
  // 1 Gbit/s (8 ns a byte), 200 us a collective, backward 0.66 s: bench 2b's two namespaces.
  const BucketCapChoice c = choose_bucket_cap({200e-6, 8e-9}, kResNetGrad, 0.66);
  EXPECT_EQ(c.cap_bytes, static_cast<size_t>(1 * kMiB)) << c.why;
  EXPECT_LT(c.exposed_s, 0.01) << c.why;
  // What PyTorch's default leaves exposed there: the whole 10.6 MiB after backward.
  const double default_exposed = 200e-6 + 10.6 * kMiB * 8e-9;
  EXPECT_GT(default_exposed, 8 * c.exposed_s);
  EXPECT_NE(c.why.find("buckets of 1 MiB"), std::string::npos) << c.why;
  EXPECT_NE(c.why.find("10.6 MiB of gradients"), std::string::npos) << c.why;
}

TEST(BucketSize, AFastLinkGetsTheLargestBucketsWithinTheTolerance) {
  // Loopback-like: 50 us, 2 GB/s; every cap's tail is under 13 ms of a 0.6 s backward.
  const BucketCapChoice loopback = choose_bucket_cap({50e-6, 0.5e-9}, kResNetGrad, 0.6);
  // Tolerance max(0.5 ms, 0.5% of 0.6 s = 3 ms): E(4 MiB) = 2.1 ms fits, E(8 MiB) = 4.2 ms does not.
  EXPECT_EQ(loopback.cap_bytes, static_cast<size_t>(4 * kMiB)) << loopback.why;
  // A GPU link: 15 us, 150 GB/s, a 20 ms backward: the tail of any cap is tiny, so the largest.
  const BucketCapChoice nvlink = choose_bucket_cap({15e-6, 1.0 / 150e9}, 500 * (1 << 20), 0.02);
  EXPECT_EQ(nvlink.cap_bytes, static_cast<size_t>(25 * kMiB)) << nvlink.why;
}

TEST(BucketSize, WhenCommunicationOutlastsBackwardFewerBucketsWin) {
  // 5 ms a collective (a far, slow network), 124M fp32 parameters, 1 Gbit/s, a short backward:
  // the latencies of 1 MiB buckets (475 of them: 2.4 s) would not hide under 1 s of backward.
  const int64_t g = 124439808LL * 4;
  const BucketCapChoice c = choose_bucket_cap({5e-3, 8e-9}, g, 1.0);
  EXPECT_GT(c.cap_bytes, static_cast<size_t>(1 * kMiB)) << c.why;
  // Unknown backward (no peak): still a valid candidate.
  const BucketCapChoice unknown = choose_bucket_cap({5e-3, 8e-9}, g, 0);
  EXPECT_GE(unknown.cap_bytes, static_cast<size_t>(1 * kMiB));
  EXPECT_LE(unknown.cap_bytes, static_cast<size_t>(25 * kMiB));
  // The same inputs give the same cap on every rank.
  EXPECT_EQ(choose_bucket_cap({5e-3, 8e-9}, g, 1.0).cap_bytes, c.cap_bytes);
}

// Note [ZeRO stage 1]: every element of every parameter is in exactly one rank's shard, shards
// are equal (padding at the end), and pieces sit where the bucket's order puts them.
TEST(ShardLayout, EveryElementOnceInEqualContiguousShards) {
  const std::vector<int64_t> numels = {7, 1, 12, 5, 3};
  const std::vector<std::vector<size_t>> buckets = {{4, 3}, {2, 1, 0}};
  for (int world : {1, 2, 3, 4, 8, 40}) {
    const auto layout = ddptrain::shard_buckets(numels, buckets, world);
    ASSERT_EQ(layout.size(), 2u);
    std::vector<std::vector<int>> seen(numels.size());
    for (size_t i = 0; i < numels.size(); ++i) seen[i].assign(static_cast<size_t>(numels[i]), 0);
    for (size_t b = 0; b < layout.size(); ++b) {
      int64_t total = 0;
      for (size_t p : buckets[b]) total += numels[p];
      EXPECT_EQ(layout[b].shard_numel, (total + world - 1) / world) << "world " << world;
      ASSERT_EQ(layout[b].by_rank.size(), static_cast<size_t>(world));
      int64_t bucket_pos = 0;  // pieces in rank order then piece order walk the bucket from its start
      for (int r = 0; r < world; ++r)
        for (const auto& piece : layout[b].by_rank[static_cast<size_t>(r)]) {
          EXPECT_EQ(r * layout[b].shard_numel + piece.shard_offset, bucket_pos) << "world " << world;
          EXPECT_LE(piece.shard_offset + piece.length, layout[b].shard_numel);
          for (int64_t e = 0; e < piece.length; ++e)
            ++seen[piece.param][static_cast<size_t>(piece.param_offset + e)];
          bucket_pos += piece.length;
        }
      EXPECT_EQ(bucket_pos, total);
    }
    for (size_t i = 0; i < numels.size(); ++i)
      for (int count : seen[i]) EXPECT_EQ(count, 1) << "param " << i << " world " << world;
  }
}
