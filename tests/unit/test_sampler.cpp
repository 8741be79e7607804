// DistributedSampler equals Python PyTorch's over the golden grid (tests/golden/sampler.txt).
#include <gtest/gtest.h>

#include "data/distributed_sampler.h"
#include "data/epoch_plan.h"
#include "golden.h"

using namespace ddptrain;

TEST(Sampler, EqualsPyTorchOverGoldenGrid) {
  auto lines = testing_golden::read_lines("sampler.txt");
  ASSERT_EQ(lines.size(), 800u) << "golden file missing or incomplete";
  size_t checked = 0;
  for (const auto& line : lines) {
    auto colon = line.find(':');
    std::istringstream head(line.substr(0, colon));
    long long n, world, rank, shuffle, seed, epoch, drop_last;
    head >> n >> world >> rank >> shuffle >> seed >> epoch >> drop_last;
    std::vector<int64_t> expect;
    std::istringstream tail(line.substr(colon + 1));
    for (long long v; tail >> v;) expect.push_back(v);
    DistributedSampler s({n, static_cast<int>(world), static_cast<int>(rank), shuffle != 0,
                          static_cast<uint64_t>(seed), drop_last != 0});
    s.set_epoch(epoch);
    ASSERT_EQ(s.indices(), expect) << line.substr(0, colon);
    ASSERT_EQ(s.num_samples(), static_cast<int64_t>(expect.size()));
    ++checked;
  }
  EXPECT_EQ(checked, 800u);
}

TEST(Sampler, EpochChangesOrderSeedIsStable) {
  DistributedSampler s({100, 2, 0, true, 7, false});
  s.set_epoch(1);
  auto a = s.indices();
  s.set_epoch(2);
  auto b = s.indices();
  s.set_epoch(1);
  EXPECT_NE(a, b);
  EXPECT_EQ(a, s.indices());
}

TEST(Sampler, RanksPartitionTheDatasetWithoutDropLast) {
  const int world = 3;
  std::vector<int> seen(10, 0);
  for (int r = 0; r < world; ++r) {
    DistributedSampler s({10, world, r, true, 0, false});
    for (auto i : s.indices()) seen[static_cast<size_t>(i)]++;
  }
  int total = 0;
  for (int c : seen) {
    EXPECT_GE(c, 1);
    total += c;
  }
  EXPECT_EQ(total, 12);  // 10 samples padded to 12 = 3 ranks x 4
}

// Note [Resume at another world size]: an epoch's plan with and without drop_last, and the
// share of its rest each rank of another world trains.
TEST(Sampler, EpochPlanCountsTheTrainedPositions) {
  EXPECT_EQ(EpochPlan::fresh(250, 2, 16).end, 224) << "125 per rank: 7 batches of 16, the 13 left dropped";
  EXPECT_EQ(EpochPlan::fresh(250, 2, 16, /*drop_last=*/false).end, 250);
  EXPECT_EQ(EpochPlan::fresh(251, 2, 16, false).end, 252)
      << "padded to a multiple of the world, as PyTorch pads";
  EpochPlan p = EpochPlan::fresh(250, 2, 16);
  p.done = 64;
  SamplerOptions o;
  o.dataset_len = 250;
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_EQ(static_cast<int64_t>(rest_of_epoch(o, 1, p, 3, rank).size()), p.rest_per_rank(3)) << rank;
  EXPECT_EQ(p.rest_per_rank(3), 54) << "160 positions left over 3 ranks";
}
