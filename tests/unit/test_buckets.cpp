// Bucket assignment is a pure function: reverse order, caps, dtype groups, determinism.
#include <gtest/gtest.h>

#include "ddp/bucket_assignment.h"

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
