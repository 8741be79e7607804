// DDP over real Gloo with ranks as threads of this process: start-up broadcast, the
// overlapped reducer against full-batch training, mean not sum, no_sync accumulation,
// unused parameters, replica verification and compression hooks.
#include <gtest/gtest.h>

#include <mutex>

#include <torch/optim/sgd.h>

#include "ddp/bucket_size.h"
#include "ddp/ddp.h"
#include "dist/backend_factory.h"
#include "dist_harness.h"

using namespace ddptrain;
using testing_dist::run_ranks;

namespace {

struct TinyNet : torch::nn::Module {
  explicit TinyNet(int64_t hidden = 16, bool with_unused = false) {
    a = register_module("a", torch::nn::Linear(8, hidden));
    b = register_module("b", torch::nn::Linear(hidden, 4));
    if (with_unused) unused = register_parameter("unused", torch::ones({3}));
  }
  torch::Tensor forward(const torch::Tensor& x) { return b(torch::tanh(a(x))); }
  torch::nn::Linear a{nullptr}, b{nullptr};
  torch::Tensor unused;  // never receives a gradient
};

// The default generator is process-wide: ranks-as-threads must not draw from it at once.
std::shared_ptr<TinyNet> make_net(uint64_t seed, int64_t hidden = 16, bool with_unused = false) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(seed);
  return std::make_shared<TinyNet>(hidden, with_unused);
}

std::vector<at::Tensor> snapshot(torch::nn::Module& m, bool grads) {
  std::vector<at::Tensor> out;
  for (auto& p : m.parameters())
    out.push_back(grads ? (p.grad().defined() ? p.grad().clone() : at::Tensor()) : p.detach().clone());
  return out;
}

double threads_max_diff(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, (a[i] - b[i]).abs().max().item<double>());
  return d;
}

// Trains TinyNet for `steps` SGD steps: world ranks, each with `per_rank` samples of every
// global batch (rank r takes rows r*per_rank ...), K micro-batches per step under no_sync.
std::vector<at::Tensor> train_tiny(int world, int64_t per_rank, int K, int steps, DdpSetup opts,
                                   std::vector<double>* losses = nullptr) {
  torch::manual_seed(11);
  const int64_t global = per_rank * world * K;
  auto x = torch::randn({steps * global, 8});
  auto y = torch::randint(0, 4, {steps * global});
  std::vector<at::Tensor> result;
  std::mutex mu;
  auto body = [&](const DistContext& ctx) {
    auto net = make_net(3);
    DistributedDataParallel ddp(net, ctx, opts);
    torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int s = 0; s < steps; ++s) {
      for (auto& p : net->parameters()) p.mutable_grad().reset();  // zero_grad(set_to_none)
      double step_loss = 0;
      for (int k = 0; k < K; ++k) {
        int64_t row = s * global + (k * world + ctx.rank()) * per_rank;
        auto loss = torch::nn::functional::cross_entropy(net->forward(x.narrow(0, row, per_rank)),
                                                         y.narrow(0, row, per_rank)) /
                    K;
        std::optional<DistributedDataParallel::NoSyncGuard> local;
        if (k + 1 < K) local.emplace(ddp);
        loss.backward();
        step_loss += loss.item<double>();
      }
      opt.step();
      if (losses && ctx.rank() == 0) losses->push_back(step_loss);
    }
    if (ctx.rank() == 0) {
      std::lock_guard<std::mutex> lock(mu);
      result = snapshot(*net, false);
    }
  };
  testing_dist::run_world(world, body);
  return result;
}

}  // namespace

// Every parameter, a frozen one too (requires_grad off: a projection nothing trains), starts as
// rank 0's, as PyTorch's DDP syncs the module's state; before, a frozen one drawn per rank
// stayed apart for the whole run.
TEST(DdpThreads, BroadcastMakesRanksEqual) {
  std::mutex mu;
  std::vector<std::vector<at::Tensor>> params(2);
  run_ranks(2, [&](const DistContext& ctx) {
    auto net = make_net(100 + static_cast<uint64_t>(ctx.rank()));  // different weights on purpose
    net->register_parameter("frozen", at::full({3}, 1.0 + ctx.rank()), /*requires_grad=*/false);
    DistributedDataParallel ddp(net, ctx, {});
    std::lock_guard<std::mutex> lock(mu);
    params[static_cast<size_t>(ctx.rank())] = snapshot(*net, false);
  });
  for (size_t i = 0; i < params[0].size(); ++i) EXPECT_TRUE(params[0][i].equal(params[1][i])) << i;
  // The root's own parameters come first in LibTorch's list.
  EXPECT_TRUE(params[1].front().equal(at::full({3}, 1.0))) << "the frozen parameter is rank 0's";
}

TEST(DdpThreads, EquivalentToOneRankWithTheGlobalBatch) {
  // World W with batch b equals world 1 with batch W*b; several bucket layouts and options.
  auto reference = train_tiny(1, 8, 1, 10, {});
  struct Variant {
    const char* name;
    int world;
    int64_t per_rank;
    DdpSetup opts;
  };
  DdpSetup tiny_buckets;
  tiny_buckets.reducer.bucket_cap_bytes = 64;
  tiny_buckets.reducer.first_bucket_bytes = 16;
  DdpSetup views = tiny_buckets;
  views.reducer.gradient_as_bucket_view = true;
  DdpSetup no_overlap = tiny_buckets;
  no_overlap.reducer.overlap = false;
  for (const Variant& v : {Variant{"world 2, b=4", 2, 4, {}}, Variant{"world 4, b=2", 4, 2, {}},
                           Variant{"world 2, tiny buckets", 2, 4, tiny_buckets},
                           Variant{"world 2, grads as bucket views", 2, 4, views},
                           Variant{"world 2, no overlap", 2, 4, no_overlap}}) {
    auto got = train_tiny(v.world, v.per_rank, 1, 10, v.opts);
    double d = threads_max_diff(got, reference);
    std::printf("%s: max |param - world-1 param| after 10 steps = %.3g\n", v.name, d);
    EXPECT_LE(d, 1e-5) << v.name;
  }
}

TEST(DdpThreads, NoSyncAccumulationEqualsBigBatch) {
  auto reference = train_tiny(1, 32, 1, 10, {});  // world 1, batch 8b with b = 4
  auto got = train_tiny(2, 4, 4, 10, {});         // world 2, K = 4 micro-batches of b
  double d = threads_max_diff(got, reference);
  std::printf("no_sync K=4 world 2 vs world 1 batch 8b: max |param diff| = %.3g\n", d);
  EXPECT_LE(d, 1e-5);
}

TEST(DdpThreads, NoSyncKeepsGradsLocalAndReducesOncePerStep) {
  std::mutex mu;
  std::vector<std::vector<at::Tensor>> local(2), synced(2);
  std::vector<ReducerStats> stats(2);
  size_t buckets = 0;
  run_ranks(2, [&](const DistContext& ctx) {
    auto net = make_net(5);
    DdpSetup o;
    o.reducer.bucket_cap_bytes = 64;
    o.reducer.first_bucket_bytes = 16;
    DistributedDataParallel ddp(net, ctx, o);
    auto x = torch::full({4, 8}, static_cast<float>(ctx.rank() + 1));
    for (int k = 0; k < 3; ++k) {
      auto guard = ddp.no_sync();
      net->forward(x).sum().backward();
    }
    auto after_local = snapshot(*net, true);
    net->forward(x).sum().backward();
    std::lock_guard<std::mutex> lock(mu);
    local[static_cast<size_t>(ctx.rank())] = after_local;
    synced[static_cast<size_t>(ctx.rank())] = snapshot(*net, true);
    stats[static_cast<size_t>(ctx.rank())] = ddp.take_stats();
    buckets = ddp.num_buckets();
  });
  EXPECT_GT(threads_max_diff(local[0], local[1]), 1e-3) << "no_sync gradients should differ across ranks";
  EXPECT_EQ(threads_max_diff(synced[0], synced[1]), 0.0);
  EXPECT_GT(buckets, 2u);
  for (const auto& s : stats) {
    EXPECT_EQ(s.allreduces, static_cast<int64_t>(buckets)) << "exactly one all-reduce per bucket per step";
    EXPECT_EQ(s.syncs, 1);
  }
}

TEST(DdpThreads, ReducedGradientIsTheMeanNotTheSum) {
  for (int world : {2, 4}) {
    std::mutex mu;
    std::vector<double> grads;
    run_ranks(world, [&](const DistContext& ctx) {
      auto lin = std::make_shared<torch::nn::LinearImpl>(torch::nn::LinearOptions(1, 1).bias(false));
      DistributedDataParallel ddp(lin, ctx, {});
      lin->forward(torch::full({1, 1}, static_cast<float>(ctx.rank()))).sum().backward();
      std::lock_guard<std::mutex> lock(mu);
      grads.push_back(lin->weight.grad().item<double>());
    });
    for (double g : grads) EXPECT_EQ(g, (world - 1) / 2.0) << "world " << world;
  }
}

// Note [The mean before the sum]: at world 3 the reduced gradient is PyTorch's reducer's, each
// rank's gradient times 1/3 summed (divided by 3 where the gradient is already the bucket's
// view), bitwise; the sum of the gradients divided after differs at some elements, so the
// comparison tells the two apart.
TEST(DdpThreads, TheMeanIsTakenBeforeTheSumAsPyTorchsReducerTakesIt) {
  for (const bool views : {false, true}) {
    std::mutex mu;
    int64_t after_differs = 0;
    run_ranks(3, [&](const DistContext& ctx) {
      std::shared_ptr<torch::nn::LinearImpl> lin, local;
      {
        std::lock_guard<std::mutex> lock(mu);
        torch::manual_seed(4);
        lin = std::make_shared<torch::nn::LinearImpl>(torch::nn::LinearOptions(256, 64).bias(false));
        local = std::make_shared<torch::nn::LinearImpl>(torch::nn::LinearOptions(256, 64).bias(false));
      }
      {
        torch::NoGradGuard no_grad;
        local->weight.copy_(lin->weight);
      }
      DdpSetup setup;
      setup.reducer.gradient_as_bucket_view = views;
      DistributedDataParallel ddp(lin, ctx, setup);
      for (int step = 0; step < 2; ++step) {  // step 1 with views: the gradient is the bucket's view
        const at::Tensor x =
            at::sin(at::arange(7 * 256, at::kFloat).reshape({7, 256}) * (0.1 + ctx.rank() + step));
        if (lin->weight.grad().defined()) lin->weight.mutable_grad().zero_();
        local->weight.mutable_grad().reset();
        lin->forward(x).square().sum().backward();
        local->forward(x).square().sum().backward();
        const at::Tensor g = local->weight.grad();
        std::vector<at::Tensor> before{views && step == 1 ? g.div(3) : g.mul(1.0 / 3)}, after{g.clone()};
        ctx.all_reduce_sum(before, "test: the mean before the sum");
        ctx.all_reduce_sum(after, "test: the mean after the sum");
        after[0].mul_(1.0 / 3);
        EXPECT_TRUE(at::equal(lin->weight.grad(), before[0])) << "views " << views << " step " << step;
        std::lock_guard<std::mutex> lock(mu);
        after_differs += lin->weight.grad().ne(after[0]).sum().item<int64_t>();
      }
    });
    EXPECT_GT(after_differs, 0) << "the two orders agree here: the test cannot tell them apart";
  }
}

// World 1: no process group by default (collectives are identities); a named backend
// (--backend gloo|nccl under a launcher) makes one, and DDP then runs its real all-reduces,
// as Python DDP does under torchrun, with an in-process store.
TEST(DdpThreads, WorldOneHasAProcessGroupOnlyWhenABackendIsNamed) {
  EnvContract env;
  env.master_addr = "127.0.0.1";
  env.master_port = testing_common::free_port();
  DistContext plain(env, {"auto", std::chrono::seconds(30)});
  EXPECT_FALSE(plain.communicates());
  EXPECT_EQ(plain.backend_name(), "none");
  DistContext named(env, {"gloo", std::chrono::seconds(30)});
  ASSERT_TRUE(named.communicates());
  EXPECT_EQ(named.backend_name(), "gloo");
  auto lin = std::make_shared<torch::nn::LinearImpl>(torch::nn::LinearOptions(4, 1));
  DistributedDataParallel ddp(lin, named, {});
  EXPECT_EQ(ddp.num_buckets(), 1u);
  lin->forward(torch::ones({2, 4})).sum().backward();
  EXPECT_EQ(ddp.take_stats().allreduces, 1);
  EXPECT_TRUE(lin->weight.grad().equal(torch::full({1, 4}, 2.0f)));  // the mean over one rank
  // A world of one keeps its store in process: a second job on the same MASTER_PORT (as
  // concurrent single-process runs would have) does not collide.
  DistContext same_port(env, {"gloo", std::chrono::seconds(30)});
  EXPECT_TRUE(same_port.communicates());
  same_port.shutdown();
  named.shutdown();
}

// find_unused_parameters as PyTorch's reducer: a parameter no rank used keeps no gradient (the
// optimizer skips it); one rank's gradient is averaged with the others' zero; a gradient
// accumulated under no_sync is a rank's contribution when the synchronised pass leaves the
// parameter out.
TEST(DdpThreads, UnusedParameterIsAnErrorOrAZeroContribution) {
  std::mutex mu;
  std::vector<std::string> errors;
  run_ranks(
      2,
      [&](const DistContext& ctx) {
        auto net = make_net(1, 16, /*with_unused=*/true);
        DistributedDataParallel ddp(net, ctx, {});
        try {
          net->forward(torch::randn({2, 8})).sum().backward();
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> lock(mu);
          errors.push_back(e.what());
        }
      },
      10);
  ASSERT_EQ(errors.size(), 2u);
  for (const auto& e : errors) {
    EXPECT_NE(e.find("'unused'"), std::string::npos) << e;
    EXPECT_NE(e.find("--find_unused_parameters"), std::string::npos) << e;
  }
  std::vector<bool> defined;
  std::vector<at::Tensor> one_rank, kept;
  const at::Tensor x = torch::randn({2, 8});
  run_ranks(2, [&](const DistContext& ctx) {
    auto net = make_net(1, 16, true);
    DdpSetup o;
    o.reducer.find_unused_parameters = true;
    DistributedDataParallel ddp(net, ctx, o);
    net->forward(x).sum().backward();  // `unused` on no rank
    const bool has = net->unused.grad().defined();
    // Used on rank 0 only: rank 0's gradient (3 x 2 rows of ones) averaged with rank 1's zero.
    net->unused.mutable_grad().reset();
    (net->forward(x).sum() + (ctx.rank() == 0 ? net->unused.sum() * 2 : at::zeros({}))).backward();
    const at::Tensor half = net->unused.grad().clone();
    // Used in a no_sync micro-batch (gradient 3 on every rank), left out of the synchronised one.
    net->unused.mutable_grad().reset();
    {
      DistributedDataParallel::NoSyncGuard local(ddp);
      (net->forward(x).sum() + net->unused.sum() * 3).backward();
    }
    net->forward(x).sum().backward();
    std::lock_guard<std::mutex> lock(mu);
    defined.push_back(has);
    one_rank.push_back(half);
    kept.push_back(net->unused.grad().clone());
  });
  EXPECT_EQ(defined, (std::vector<bool>{false, false})) << "a parameter no rank used got a gradient";
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(one_rank[r].equal(torch::ones({3}))) << "rank " << r << ": " << one_rank[r];
    EXPECT_TRUE(kept[r].equal(torch::full({3}, 3.0))) << "rank " << r << ": " << kept[r];
  }
}

TEST(DdpThreads, MismatchedModelsFailOnEveryRank) {
  std::mutex mu;
  std::vector<std::string> errors;
  run_ranks(
      2,
      [&](const DistContext& ctx) {
        auto net = make_net(1, ctx.rank() == 0 ? 16 : 12);  // rank 1 has other layer shapes
        try {
          DistributedDataParallel ddp(net, ctx, {});
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> lock(mu);
          errors.push_back(e.what());
        }
      },
      20);
  ASSERT_EQ(errors.size(), 2u) << "every rank must fail";
  std::string all = errors[0] + "\n" + errors[1];
  EXPECT_NE(all.find("a.weight [16, 8]"), std::string::npos) << all;
  EXPECT_NE(all.find("a.weight [12, 8]"), std::string::npos) << all;
}

TEST(DdpThreads, CompressionHooksTrainLikeFp32) {
  std::vector<double> base, fp16, bf16;
  train_tiny(2, 4, 1, 20, {}, &base);
  DdpSetup h16, hbf;
  h16.reducer.comm_hook = CommHook::kFp16;
  hbf.reducer.comm_hook = CommHook::kBf16;
  train_tiny(2, 4, 1, 20, h16, &fp16);
  train_tiny(2, 4, 1, 20, hbf, &bf16);
  ASSERT_EQ(base.size(), 20u);
  std::printf("final loss: fp32 %.6f, fp16 hook %.6f, bf16 hook %.6f\n", base.back(), fp16.back(),
              bf16.back());
  EXPECT_LE(std::abs(fp16.back() - base.back()) / base.back(), 1e-2);
  EXPECT_LE(std::abs(bf16.back() - base.back()) / base.back(), 1e-2);
  EXPECT_NE(fp16.back(), base.back()) << "the hook did not change the arithmetic at all";
  EXPECT_NE(bf16.back(), base.back()) << "the hook did not change the arithmetic at all";
}

TEST(DdpThreads, BuffersFollowRankZero) {
  std::mutex mu;
  std::vector<at::Tensor> stats(2);
  run_ranks(2, [&](const DistContext& ctx) {
    auto bn = torch::nn::BatchNorm1d(4);
    auto holder = std::make_shared<torch::nn::Sequential>(bn);
    DistributedDataParallel ddp(holder->ptr(), ctx, {});
    bn->forward(torch::arange(32, at::kFloat).reshape({8, 4}) * (ctx.rank() + 1));
    ddp.sync_buffers();
    std::lock_guard<std::mutex> lock(mu);
    stats[static_cast<size_t>(ctx.rank())] =
        torch::cat({bn->running_mean, bn->running_var, bn->num_batches_tracked.to(at::kFloat).reshape(1)});
  });
  EXPECT_TRUE(stats[0].equal(stats[1]));
}

// Note [Bucket size from the link]: every rank must build the same buckets, so the cap comes
// from numbers averaged over the ranks, never from what one rank measured or estimated alone
// (a bench run once died on exactly that: ranks with different kernel-probe peaks, so
// different backward estimates, chose different caps and their all-reduces did not match).
TEST(DdpThreads, AutoBucketCapIsTheSameOnEveryRank) {
  std::vector<BucketCapChoice> choices(2);
  testing_dist::run_ranks(2, [&](const DistContext& ctx) {
    const double my_backward_s = ctx.rank() == 0 ? 0.0 : 100.0;
    choices[static_cast<size_t>(ctx.rank())] = agreed_bucket_cap(ctx, 64LL << 20, my_backward_s);
  });
  std::printf("rank 0: %s\nrank 1: %s\n", choices[0].why.c_str(), choices[1].why.c_str());
  EXPECT_EQ(choices[0].cap_bytes, choices[1].cap_bytes);
  EXPECT_EQ(choices[0].why, choices[1].why);  // the same averaged latency, bandwidth and backward
  EXPECT_NE(choices[0].why.find("backward ~50.000 s"), std::string::npos) << choices[0].why;
}

// Note [Collectives on the backend's device]: NCCL takes only tensors on the rank's own GPU, so
// the step-line loss, votes, RNG states and replica checks that live elsewhere are staged by
// DistContext; Gloo takes CPU (and CUDA) tensors as they are. Devices only: no GPU needed.
TEST(Staging, WhereEachBackendTakesATensor) {
  const at::Device cpu(at::kCPU), cuda0(at::kCUDA, 0), cuda1(at::kCUDA, 1);
  EXPECT_EQ(staging_device("nccl", cuda1, cpu), cuda1);    // a CPU tensor handed to NCCL
  EXPECT_EQ(staging_device("nccl", cuda1, cuda0), cuda1);  // another GPU's tensor
  EXPECT_FALSE(staging_device("nccl", cuda1, cuda1).has_value());
  EXPECT_FALSE(staging_device("gloo", cpu, cpu).has_value());
  EXPECT_FALSE(staging_device("gloo", cuda0, cuda0).has_value());  // Gloo stages CUDA tensors itself
  EXPECT_EQ(staging_device("gloo", cpu, at::Device(at::kMeta)), cpu);
}

TEST(Staging, GlooReducesCpuTensorsInPlaceWithoutStaging) {
  testing_dist::run_ranks(2, [](const DistContext& ctx) {
    std::vector<at::Tensor> t{at::full({3}, static_cast<double>(ctx.rank() + 1), at::kDouble)};
    ctx.all_reduce_sum(t, "test all_reduce");
    EXPECT_TRUE(at::equal(t[0], at::full({3}, 3.0, at::kDouble)));
    std::vector<at::Tensor> b{at::full({2}, static_cast<float>(ctx.rank()))};
    ctx.broadcast(b, 1, "test broadcast");
    EXPECT_TRUE(at::equal(b[0], at::ones({2})));
    EXPECT_EQ(ctx.staged_collectives(), 0);
  });
}

// Note [Communication wait on a GPU]: on CPU the wait is the host's; each take starts anew.
// (CUDA's event pairs run only on a GPU: tests/cuda, scripts/gpu-check.sh.)
TEST(WaitClock, CpuClockCountsTheHostWaitOnceAndResets) {
  WaitClock clock(c10::Device(c10::kCPU));
  clock.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  clock.stop();
  clock.start();
  clock.stop();
  const double waited = clock.take_seconds();
  EXPECT_GE(waited, 0.020);
  EXPECT_LT(waited, 5.0);
  EXPECT_EQ(clock.take_seconds(), 0.0);
}

// An asynchronous collective cannot be staged (the copy back would be the caller's to forget
// after its wait), so a tensor the backend does not take is refused at once, by name, instead
// of reaching the backend (NCCL's "Tensors must be CUDA and dense"). A meta tensor stands in
// for "not where the backend takes it" on this CPU-only machine.
TEST(Staging, AnAsynchronousCollectiveRefusesATensorTheBackendDoesNotTake) {
  testing_dist::run_ranks(2, [](const DistContext& ctx) {
    std::vector<at::Tensor> t{at::empty({2}, at::TensorOptions().device(at::kMeta))};
    try {
      ctx.all_reduce_sum_async(t);
      ADD_FAILURE() << "no error";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("an asynchronous all_reduce got a tensor on meta"),
                std::string::npos)
          << e.what();
    }
  });
}

#include "data/data_options.h"
#include "ddp/fully_sharded.h"
#include "models/build_model.h"

// Note [Units]: a unit whose backward reads none of its parameters (Llama's untied embedding:
// the lookup's gradient needs the indices and the output's gradient only) is gathered for its
// forward and not again (nor ahead) for its backward: ZeRO-3 issues one all-gather fewer per
// step, and the gradients are the unsharded model's, bit for bit.
TEST(DdpThreads, StageThreeGathersAnEmbeddingUnitForItsForwardOnly) {
  ModelOptions o;
  o.model = ModelKind::kLlama;
  o.gpt_preset = GptPreset::kDebug;
  o.vocab_size = 64;
  at::manual_seed(31);
  const at::Tensor tokens = at::randint(0, 64, {2, 16}, at::kLong);
  auto loss_of = [](const at::Tensor& logits) { return (logits * logits).mean(); };
  torch::manual_seed(3);
  auto ref = build_model(o, DatasetShape{});
  loss_of(ref->forward(tokens)).backward();
  std::vector<std::shared_ptr<Model>> models;  // built here: the ranks' threads share one generator
  for (int r = 0; r < 2; ++r) {
    torch::manual_seed(3);
    models.push_back(build_model(o, DatasetShape{}));
  }
  run_ranks(2, [&](const DistContext& ctx) {
    const std::shared_ptr<Model>& m = models[static_cast<size_t>(ctx.rank())];
    const size_t units = m->units().size();
    ASSERT_GE(units, 3u) << "embedding, layers and lm_head: an untied Llama";
    ASSERT_FALSE(m->units().backward_reads_parameters(0)) << m->units().name(0);
    const std::vector<at::Tensor> params = m->parameters();
    FullyShardedParams sharded(params, unit_buckets(params, &m->units()), &m->units(), ctx);
    const at::Tensor logits = sharded.forward([&](const at::Tensor& t) { return m->forward(t); }, tokens);
    EXPECT_EQ(sharded.gathers_issued(), static_cast<int64_t>(units) + 1) << "forward: each unit and the root";
    loss_of(logits).backward();
    EXPECT_EQ(sharded.gathers_issued(), 2 * static_cast<int64_t>(units))
        << "backward: every unit again but the embedding (" << units << " units)";
    const std::vector<at::Tensor> want = ref->parameters();
    ASSERT_EQ(params.size(), want.size());
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_TRUE(at::equal(params[i].grad(), want[i].grad())) << "parameter " << i;
  });
}
