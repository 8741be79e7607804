// Note [OpenMP threads of ranks that share cores]: the pure rules the launcher and the
// trainer share; Note [The first parallel call of a vector math function].
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

#include "train/vector_math_first_calls.h"
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

// Note [The first parallel call of a vector math function]: after the serial first calls, each
// function's result over a tensor that ATen splits among 2 threads is the serial code's, value
// for value (the race itself shows in about 2% of fresh processes under load: the note's
// measurement, not a test's).
TEST(VectorMath, AfterTheFirstCallsAParallelResultIsTheSerialOne) {
  make_first_vector_math_calls();
  const int threads = at::get_num_threads();
  at::set_num_threads(std::max(2, threads));
  for (const auto dtype : {at::kFloat, at::kDouble}) {
    const at::Tensor x = at::rand({16384}, at::TensorOptions().dtype(dtype)) * 0.9 + 0.05;  // every domain
    for (const auto& [name, f] : vector_math_functions()) {
      std::vector<at::Tensor> parts;  // 1,024 elements each: below ATen's split, so in this thread
      for (int64_t i = 0; i < x.numel(); i += 1024) parts.push_back(f(x.narrow(0, i, 1024).contiguous()));
      EXPECT_TRUE(at::equal(f(x), at::cat(parts))) << name << " " << c10::toString(dtype);
    }
  }
  at::set_num_threads(threads);
}
