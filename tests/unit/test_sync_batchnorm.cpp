// SyncBatchNorm over real Gloo with ranks as threads of this process: MiniResNet with it at
// worlds 2 and 4 trains as one rank with the whole batch, and bf16 inputs are normalised in fp32.
#include <gtest/gtest.h>

#include <mutex>

#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include "ddp/ddp.h"
#include "ddp/sync_batchnorm.h"
#include "dist_harness.h"
#include "models/mini_resnet.h"

using namespace ddptrain;

namespace {

// MiniResNet (width 1/8, 8x8 images): world ranks of per_rank samples each, SyncBatchNorm
// when world > 1. Checks after every step that parameters and buffers are bitwise equal on
// all ranks; returns rank 0's final state.
std::vector<at::Tensor> train_resnet(int world, int64_t per_rank, int steps) {
  torch::manual_seed(21);
  const int64_t global = per_rank * world;
  auto x = torch::randn({steps * global, 3, 8, 8});
  auto y = torch::randint(0, 10, {steps * global});
  std::vector<at::Tensor> result;
  std::mutex mu;
  std::vector<std::vector<at::Tensor>> per_step(static_cast<size_t>(world));
  auto body = [&](const DistContext& ctx) {
    MiniResNetOptions o{3, 10, 0.125};
    if (ctx.world_size() > 1) o.norm = sync_batchnorm_factory(ctx);
    MiniResNet net(nullptr);
    {
      static std::mutex init_mu;
      std::lock_guard<std::mutex> lock(init_mu);
      torch::manual_seed(42);
      net = MiniResNet(o);
    }
    DistributedDataParallel ddp(net.ptr(), ctx, {});
    torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-4));
    for (int s = 0; s < steps; ++s) {
      for (auto& p : net->parameters()) p.mutable_grad().reset();
      int64_t row = s * global + ctx.rank() * per_rank;
      ddp.sync_buffers();
      torch::nn::functional::cross_entropy(net->forward(x.narrow(0, row, per_rank)),
                                           y.narrow(0, row, per_rank))
          .backward();
      opt.step();
      std::vector<at::Tensor> state;
      for (auto& t : net->parameters()) state.push_back(t.detach().clone());
      for (auto& t : net->buffers()) state.push_back(t.detach().clone());
      std::lock_guard<std::mutex> lock(mu);
      per_step[static_cast<size_t>(ctx.rank())].push_back(torch::cat([&] {
        std::vector<at::Tensor> flat;
        for (auto& t : state) flat.push_back(t.reshape(-1).to(at::kDouble));
        return flat;
      }()));
      if (ctx.rank() == 0 && s == steps - 1) result = state;
    }
  };
  testing_dist::run_world(world, body);
  testing_dist::expect_ranks_bitwise_equal(per_step);
  return result;
}

}  // namespace

TEST(DdpThreads, SyncBatchNormResNetEquivalentToOneRank) {
  auto reference = train_resnet(1, 8, 10);
  for (auto [world, per_rank] : {std::pair{2, int64_t{4}}, std::pair{4, int64_t{2}}}) {
    auto got = train_resnet(world, per_rank, 10);
    ASSERT_EQ(got.size(), reference.size());
    double d = 0;
    for (size_t i = 0; i < got.size(); ++i)
      d = std::max(d, (got[i].to(at::kDouble) - reference[i].to(at::kDouble)).abs().max().item<double>());
    std::printf(
        "MiniResNet --sync_bn world %d batch %lld vs world 1 batch 8: max |param/buffer diff| after 10 steps "
        "= %.3g\n",
        world, static_cast<long long>(per_rank), d);
    EXPECT_LE(d, 1e-5) << "world " << world;
  }
}

// SyncBatchNorm of bf16 inputs (a conv's output under autocast) normalises in fp32 and returns
// bf16, as PyTorch's batch_norm_elemt: the rounded fp32 batch norm of the whole batch, not
// x - mean in bf16 (which lost up to 5e-3 a channel).
TEST(DdpThreads, SyncBatchNormOfBf16InputsNormalisesInFp32) {
  torch::manual_seed(23);
  const at::Tensor x = (torch::randn({8, 4, 5, 5}) * 2 + 3).to(at::kBFloat16);
  const at::Tensor want = at::batch_norm(x.to(at::kFloat), torch::ones({4}), torch::zeros({4}), {}, {},
                                         /*training=*/true, 0.1, 1e-5, false);
  std::mutex mu;
  std::vector<at::Tensor> got(2);
  testing_dist::run_world(2, [&](const DistContext& ctx) {
    SyncBatchNorm bn(4, ctx);
    const at::Tensor y = bn->forward(x.narrow(0, 4 * ctx.rank(), 4));
    std::lock_guard<std::mutex> lock(mu);
    got[static_cast<size_t>(ctx.rank())] = y.detach();
  });
  const at::Tensor y = at::cat(got);
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  const double same = y.eq(want.to(at::kBFloat16)).to(at::kDouble).mean().item<double>();
  std::printf("SyncBatchNorm of bf16 inputs: %.4f of the outputs are the rounded fp32 batch norm\n", same);
  EXPECT_GE(same, 0.99);
}
