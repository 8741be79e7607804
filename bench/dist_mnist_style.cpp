// Benchmark for #13: the gradient averaging of pytorch/examples' cpp/distributed/dist-mnist.cpp,
// written anew here to compare with examples/ddp_loop.cpp. After backward: one asynchronous
// all-reduce per parameter, each gradient divided by the world size as soon as its all-reduce
// has been started (not after it completed), then a wait for all of them; so no overlap with
// backward, no buckets, no broadcast of the initial weights (the same seed on every rank
// instead). Model, data, sampler, loader and batch are ddp_loop's: only the gradient sync
// differs.
//   ddptrain launch --nproc_per_node 2 ./bench_dist_mnist_style DATA_DIR STEPS [--check]
// --check: after each step's waits, compares every gradient with the true mean over the
// ranks (a synchronous all-reduce of copies of the local gradients taken before) and prints
// on how many steps all gradients were that mean.
#include <chrono>
#include <cstdio>
#include <cstring>

#include <ddptrain/ddptrain.h>
#include <torch/torch.h>

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(28 * 28, 128));
    fc2 = register_module("fc2", torch::nn::Linear(128, 10));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(fc1(x.flatten(1)))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

// The approach under test: start an all-reduce per parameter, divide at once, wait for all.
void average_like_dist_mnist(const ddptrain::DistContext& ctx, Net& net) {
  std::vector<std::vector<at::Tensor>> held;
  std::vector<ddptrain::compat::WorkHandle> works;
  for (auto& p : net.parameters()) {
    held.push_back({p.grad()});
    works.push_back(ctx.all_reduce_sum_async(held.back()));
    p.grad().data() = p.grad().data() / ctx.world_size();  // assigns into the gradient's storage
  }
  for (auto& w : works) ctx.wait(w, "per-parameter all_reduce");
}

int main(int argc, char** argv) try {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_dist_mnist_style DATA_DIR STEPS [--check]\n");
    return 2;
  }
  const long long steps = std::stoll(argv[2]);
  const bool check = argc > 3 && std::strcmp(argv[3], "--check") == 0;
  torch::manual_seed(0);
  auto ctx = ddptrain::join();
  auto net = std::make_shared<Net>();
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  ddptrain::IdxDataset train(argv[1], "train", 0.2860, 0.3530, "Fashion-MNIST");
  ddptrain::DistributedSampler sampler({train.size(), ctx->world_size(), ctx->rank(), true, 0});
  ddptrain::Loader loader(train, {64, 2});
  long long step = 0, exact = 0;
  double worst = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int epoch = 1; step < steps; ++epoch) {
    sampler.set_epoch(epoch);
    loader.start(sampler.indices());
    while (auto batch = loader.next()) {
      for (auto& p : net->parameters()) p.mutable_grad().reset();
      torch::nn::functional::cross_entropy(net->forward(batch->inputs), batch->targets).backward();
      std::vector<at::Tensor> mean;  // one flat tensor: the sum of every rank's gradients
      if (check) {
        for (auto& p : net->parameters()) mean.push_back(p.grad().flatten());
        mean = {at::cat(mean)};
        ctx->all_reduce_sum(mean, "check");
      }
      average_like_dist_mnist(*ctx, *net);
      if (check) {
        std::vector<at::Tensor> grads;
        for (auto& p : net->parameters()) grads.push_back(p.grad().flatten());
        const double d = (at::cat(grads) - mean[0] / ctx->world_size()).abs().max().item<double>();
        exact += d <= 1e-6;
        worst = std::max(worst, d);
      }
      sgd.step();
      if (++step == steps) break;
    }
    loader.stop();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (ctx->is_main()) {
    std::printf("dist-mnist style: %lld steps on %d ranks, %.0f samples/s\n", step, ctx->world_size(),
                static_cast<double>(step) * 64 * ctx->world_size() / s);
    if (check)
      std::printf("gradients equal to the mean over ranks on %lld of %lld steps; largest deviation %.3g\n",
                  exact, step, worst);
  }
  ctx->shutdown();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_dist_mnist_style: %s\n", e.what());
  return 1;
}
