// Note [OpenMP threads of ranks that share cores]: the pure rules the launcher and the
// trainer share.
#include <gtest/gtest.h>

#include "util/thread_policy.h"

using namespace ddptrain;

TEST(ThreadPolicy, ThreadsPerRankShareTheCoresUnlessGiven) {
  EXPECT_EQ(threads_per_rank(0, 2, 1), 2);
  EXPECT_EQ(threads_per_rank(0, 2, 2), 1);
  EXPECT_EQ(threads_per_rank(0, 16, 4), 4);
  EXPECT_EQ(threads_per_rank(0, 2, 8), 1);  // more ranks than cores: one thread each
  EXPECT_EQ(threads_per_rank(3, 2, 2), 3);  // --threads wins
}

TEST(ThreadPolicy, PassiveWaitingOnlyWhenThreadsOutnumberTheCores) {
  EXPECT_TRUE(threads_outnumber_cores(2, 2, 2));   // the measured case: 2 ranks x 2 threads on 2 cores
  EXPECT_FALSE(threads_outnumber_cores(2, 1, 2));  // the default on 2 cores
  EXPECT_FALSE(threads_outnumber_cores(1, 2, 2));  // one process with its cores: spinning pays
  EXPECT_FALSE(threads_outnumber_cores(8, 1, 2));  // one thread each: no OpenMP team to spin
  EXPECT_TRUE(threads_outnumber_cores(4, 8, 16));
  EXPECT_FALSE(threads_outnumber_cores(2, 2, 0));  // cores unknown
}
