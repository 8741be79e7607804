// The loader's threads and batch buffers: a sample's large op runs in its loader thread alone
// (no intra-op team of its own), and a batch's buffer is written again only once nothing holds
// it or a view of it.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <filesystem>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "data/datasets.h"
#include "data/loader.h"

using namespace ddptrain;

namespace {
int data_threads_now() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// A dataset whose get() runs a large ATen op (a parallel region inside LibTorch) and records
// the threads the process then has.
class ParallelProbe : public Dataset {
 public:
  int64_t size() const override { return 8; }
  Example get(int64_t index) const override {
    at::Tensor t = at::ones({int64_t{1} << 22});
    t.mul_(2).add_(1);
    int seen = data_threads_now(), prev = most.load();
    while (seen > prev && !most.compare_exchange_weak(prev, seen)) {
    }
    return {at::zeros({3, 4, 4}), at::scalar_tensor(index, at::kLong)};
  }
  mutable std::atomic<int> most{0};
};
}  // namespace

TEST(Data, LoaderThreadsRunASamplesOpsInlineNotInAnIntraOpTeam) {
  // Note [Loader threads open no OpenMP team]: a sample's large op runs in the loader thread
  // alone; the calling thread keeps its team.
  at::set_num_threads(std::max(2, at::get_num_threads()));  // as the trainer sets --threads
  ParallelProbe probe;
  probe.get(0);  // the calling thread's team, started once
  const int base = data_threads_now();
  probe.most = 0;
  LoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 2;
  Loader loader(probe, o);
  loader.start({0, 1, 2, 3, 4, 5, 6, 7});
  while (loader.next()) {
  }
  ASSERT_NE(::dlsym(RTLD_DEFAULT, "omp_set_num_threads"), nullptr) << "this LibTorch runs no OpenMP";
  EXPECT_GE(base, 2) << "the calling thread's op started no team: the probe proves nothing";
  // LibTorch 1.13's first op in a thread (its lazy init, here at::get_num_threads() in each
  // loader thread) calls at::set_num_threads, which there recreates the global pthreadpool
  // unconditionally (newer releases skip an equal count): the new pool's thread is started
  // before the old one is gone, one thread more for a moment (gdb: pthreadpool_create under
  // at::set_num_threads). Teams would add a thread per loader thread, beyond that.
  const int transient = TORCH_VERSION_MAJOR < 2 ? 1 : 0;
  EXPECT_LE(probe.most.load(), base + 2 + transient)
      << "the loader's 2 threads opened intra-op teams of their own";
  EXPECT_GT(at::get_num_threads(), 1) << "the calling thread's own team size changed";
}

namespace {
// Samples of 3 x 256 x 256 floats (768 KiB): a batch of 4 is over the pool's 1 MiB.
class LargeSamples : public Dataset {
 public:
  int64_t size() const override { return 16; }
  Example get(int64_t index) const override {
    return {at::full({3, 256, 256}, static_cast<float>(index)), at::scalar_tensor(index, at::kLong)};
  }
};
}  // namespace

TEST(Data, LargeBatchBuffersAreReusedOnlyOnceNothingHoldsThem) {
  // Note [Batch buffers recycled]: a batch held, or only a view of it, is never written again.
  LargeSamples data;
  LoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 0;
  Loader loader(data, o);
  loader.start({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
  auto first = loader.next();
  const void* p1 = first->inputs.data_ptr();
  at::Tensor view = first->inputs[1];
  first.reset();
  auto second = loader.next();
  EXPECT_NE(second->inputs.data_ptr(), p1) << "a buffer a view still reads was reused";
  EXPECT_EQ(view[0][0][0].item<float>(), 1.0f) << "the view's data was overwritten";
  const void* p2 = second->inputs.data_ptr();
  second.reset();
  view = at::Tensor();
  auto third = loader.next();
  const void* p3 = third->inputs.data_ptr();
  EXPECT_TRUE(p3 == p1 || p3 == p2) << "no buffer was reused once nothing held them";
  for (int j = 0; j < 4; ++j) EXPECT_TRUE(third->inputs[j].equal(data.get(8 + j).input)) << "row " << j;
  auto fourth = loader.next();
  EXPECT_NE(fourth->inputs.data_ptr(), third->inputs.data_ptr()) << "a batch still held was reused";
  for (int j = 0; j < 4; ++j) EXPECT_TRUE(fourth->inputs[j].equal(data.get(12 + j).input)) << "row " << j;
}
