// Note [CPU heap kept across steps]: a step-like pattern (allocate ~80 MiB of activation-sized
// blocks, touch them, free them all) page-faults its memory back in every step under glibc's
// default policy, and almost never once keep_cpu_heap() is set.
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "obs/memory.h"

namespace ddptrain {
namespace {

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// Minor page faults of steps 4..6 of a loop that allocates, touches and frees 40 blocks of
// 2 MiB (plus the counting allocator's 64-byte header), as LibTorch's alloc_cpu does.
long faults_of_repeated_steps() {
  constexpr size_t kBlock = (2u << 20) + 64;
  auto step = [] {
    std::vector<void*> blocks(40, nullptr);
    for (auto& b : blocks) {
      if (posix_memalign(&b, 64, kBlock) != 0) std::abort();
      std::memset(b, 1, kBlock);
    }
    for (auto* b : blocks) std::free(b);
  };
  for (int s = 0; s < 3; ++s) step();  // the heap settles (alignment splits) in a few steps
  const long before = minor_faults();
  for (int s = 0; s < 3; ++s) step();
  return minor_faults() - before;
}

TEST(CpuHeap, KeptAcrossStepsInsteadOfFaultedBackIn) {
  // 4 KiB pages whatever the host's transparent-huge-page setting, so faults count pages.
  ASSERT_EQ(prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0), 0);
  // glibc's own policy, measured in a child so this process keeps it unchanged until now.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const long f = faults_of_repeated_steps();
    (void)!write(fds[1], &f, sizeof(f));
    _exit(0);
  }
  long default_faults = -1;
  ASSERT_EQ(read(fds[0], &default_faults, sizeof(default_faults)),
            static_cast<ssize_t>(sizeof(default_faults)));
  waitpid(child, nullptr, 0);
  close(fds[0]);
  close(fds[1]);

  EXPECT_FALSE(keep_cpu_heap(0)) << "0 must leave glibc's policy alone";
  ASSERT_TRUE(keep_cpu_heap(int64_t{1} << 30));
  const long kept_faults = faults_of_repeated_steps();
  std::printf("minor page faults over 3 steps of 80 MiB: glibc default %ld, kept heap %ld\n", default_faults,
              kept_faults);
  EXPECT_GT(default_faults, 10000) << "glibc no longer trims its heap each step: revisit the Note";
  EXPECT_LT(kept_faults, 1000);
}

}  // namespace
}  // namespace ddptrain
