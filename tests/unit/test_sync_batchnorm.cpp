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
#include "trainer_fixtures.h"

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

namespace {

// SyncBatchNorm between two linear layers; `gate` is used only where the batch's sum is
// positive, so in some steps one rank uses it and the other does not.
struct GatedSyncBnNet : torch::nn::Module {
  explicit GatedSyncBnNet(const DistContext& ctx) {
    a = register_module("a", torch::nn::Linear(8, 16));
    bn = register_module("bn", SyncBatchNorm(16, ctx));
    b = register_module("b", torch::nn::Linear(16, 4));
    gate = register_module("gate", torch::nn::Linear(16, 4));
  }
  at::Tensor forward(const at::Tensor& x) {
    const bool use_gate = x.sum().item<double>() > 0;
    used.push_back(use_gate);
    const at::Tensor h = torch::tanh(bn(a(x)));
    return use_gate ? b(h) + gate(h) : b(h);
  }
  torch::nn::Linear a{nullptr}, b{nullptr}, gate{nullptr};
  SyncBatchNorm bn{nullptr};
  std::vector<bool> used;
};

}  // namespace

// Note [Unused parameters and collectives in backward]: with find_unused_parameters and a
// bucket per parameter, a rank that used `gate` all-reduced its bucket before SyncBatchNorm's
// backward all-reduce and a rank that did not after it (at the end of backward): the ranks'
// collectives parted. The Trainer launches every bucket after backward there: the run ends
// with the replicas equal.
TEST(DdpThreads, SyncBatchNormWithAParameterSomeRanksLeaveOut) {
  using namespace ddptrain::trainer_test;
  TrainerOptions o = quiet_fp32(8, 1);
  o.ddp.find_unused_parameters = true;
  o.ddp.bucket_cap_mb = 1e-6;  // a bucket per parameter
  o.ddp.first_bucket_mb = 1e-6;
  std::vector<std::vector<at::Tensor>> params(2);
  std::vector<std::vector<bool>> used(2);
  std::mutex mu;
  testing_dist::run_ranks(2, [&](const DistContext& ctx) {
    std::shared_ptr<GatedSyncBnNet> net;
    {
      std::lock_guard<std::mutex> lock(mu);
      torch::manual_seed(5);
      net = std::make_shared<GatedSyncBnNet>(ctx);
    }
    auto optimizer = make_optimizer(*net, /*adamw=*/false);
    Trainer trainer(ctx, trainable(net), *optimizer, o);
    UserData train(96, false);
    trainer.fit(train, nullptr);
    std::lock_guard<std::mutex> lock(mu);
    used[static_cast<size_t>(ctx.rank())] = net->used;
    for (const auto& p : net->parameters())
      params[static_cast<size_t>(ctx.rank())].push_back(p.detach().clone());
  });
  ASSERT_NE(used[0], used[1]) << "the test needs a step where one rank uses gate and the other not";
  ASSERT_EQ(params[0].size(), params[1].size());
  for (size_t i = 0; i < params[0].size(); ++i) EXPECT_TRUE(params[0][i].equal(params[1][i])) << i;
}
