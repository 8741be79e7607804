// DDP over real Gloo with ranks as threads: the start-up broadcast makes every rank equal,
// and the bucketed all-reduce leaves exactly the full-batch gradient in every rank's grads.
#include <gtest/gtest.h>

#include <mutex>

#include "ddp/ddp.h"
#include "dist_harness.h"

using namespace ddptrain;
using testing_dist::run_ranks;

namespace {

struct TinyNet : torch::nn::Module {
  TinyNet() {
    a = register_module("a", torch::nn::Linear(8, 16));
    b = register_module("b", torch::nn::Linear(16, 4));
    unused = register_parameter("unused", torch::ones({3}));
  }
  torch::Tensor forward(const torch::Tensor& x) { return b(torch::tanh(a(x))); }
  torch::nn::Linear a{nullptr}, b{nullptr};
  torch::Tensor unused;  // never receives a gradient
};

// The default generator is process-wide: ranks-as-threads must not draw from it at once.
std::shared_ptr<TinyNet> make_net(uint64_t seed) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(seed);
  return std::make_shared<TinyNet>();
}

std::vector<at::Tensor> full_batch_grads(const at::Tensor& x, const at::Tensor& y) {
  auto net = make_net(0);
  torch::nn::functional::cross_entropy(net->forward(x), y).backward();
  std::vector<at::Tensor> g;
  for (auto& p : net->parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : at::zeros_like(p));
  return g;
}

}  // namespace

TEST(DdpThreads, BroadcastMakesRanksEqual) {
  std::mutex mu;
  std::vector<std::vector<at::Tensor>> params(2);
  run_ranks(2, [&](const DistContext& ctx) {
    auto net = make_net(100 + static_cast<uint64_t>(ctx.rank()));  // different weights on purpose
    DistributedDataParallel ddp(net, ctx, {});
    std::lock_guard<std::mutex> lock(mu);
    for (auto& p : net->parameters()) params[static_cast<size_t>(ctx.rank())].push_back(p.detach().clone());
  });
  ASSERT_EQ(params[0].size(), params[1].size());
  for (size_t i = 0; i < params[0].size(); ++i) EXPECT_TRUE(params[0][i].equal(params[1][i])) << i;
}

TEST(DdpThreads, AveragedGradientsEqualFullBatch) {
  torch::manual_seed(7);
  auto x = torch::randn({16, 8});
  auto y = torch::randint(0, 4, {16});
  auto expect = full_batch_grads(x, y);
  // Tiny buckets force several all-reduces, each with a pending Work, to be exercised.
  for (size_t cap : {size_t(64), size_t(25) << 20}) {
    std::mutex mu;
    std::vector<std::vector<at::Tensor>> grads(2);
    size_t buckets = 0;
    run_ranks(2, [&](const DistContext& ctx) {
      auto net = make_net(0);
      DistributedDataParallel ddp(net, ctx, {cap, cap, true});
      auto xs = x.narrow(0, ctx.rank() * 8, 8), ys = y.narrow(0, ctx.rank() * 8, 8);
      torch::nn::functional::cross_entropy(net->forward(xs), ys).backward();
      ddp.sync_gradients();
      std::lock_guard<std::mutex> lock(mu);
      buckets = ddp.num_buckets();
      for (auto& p : net->parameters()) grads[static_cast<size_t>(ctx.rank())].push_back(p.grad().clone());
    });
    if (cap == 64) EXPECT_GT(buckets, 2u);
    double max_diff = 0;
    for (int r = 0; r < 2; ++r)
      for (size_t i = 0; i < expect.size(); ++i)
        max_diff = std::max(max_diff, (grads[static_cast<size_t>(r)][i] - expect[i]).abs().max().item<double>());
    std::printf("bucket cap %zu B: %zu buckets, max |ddp grad - full-batch grad| = %.3g\n", cap, buckets, max_diff);
    EXPECT_LT(max_diff, 1e-6);
    for (size_t i = 0; i < expect.size(); ++i) EXPECT_TRUE(grads[0][i].equal(grads[1][i]));
  }
}

TEST(DdpThreads, BuffersFollowRankZero) {
  std::mutex mu;
  std::vector<at::Tensor> stats(2);
  run_ranks(2, [&](const DistContext& ctx) {
    auto bn = torch::nn::BatchNorm1d(4);
    auto holder = std::make_shared<torch::nn::Sequential>(bn);
    DistributedDataParallel ddp(holder->ptr(), ctx, {});
    bn->forward(torch::arange(32, at::kFloat).reshape({8, 4}) * (ctx.rank() + 1));  // ranks see different data
    ddp.sync_buffers();
    std::lock_guard<std::mutex> lock(mu);
    stats[static_cast<size_t>(ctx.rank())] = torch::cat({bn->running_mean, bn->running_var,
                                                          bn->num_batches_tracked.to(at::kFloat).reshape(1)});
  });
  EXPECT_TRUE(stats[0].equal(stats[1]));
}
