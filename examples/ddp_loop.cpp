// (b) A hand-written training loop with only DistributedDataParallel and DistributedSampler:
// what pytorch/examples' dist-mnist.cpp sets out to do, with the gradients all-reduced in
// buckets while backward runs (not parameter by parameter after it), averaged over the
// ranks, weights broadcast from rank 0 at the start, and each rank on its own shard.
//   ddptrain launch --nproc_per_node 2 ./ddp_loop [DATA_DIR [MAX_STEPS]]
#include <chrono>
#include <cstdio>

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

int main(int argc, char** argv) try {
  const std::string data = argc > 1 ? argv[1] : ddptrain::kFashionMnistDir;
  const long long max_steps = argc > 2 ? std::stoll(argv[2]) : -1;
  auto ctx = ddptrain::join();
  auto net = std::make_shared<Net>();
  net->to(ctx->device());                            // the rank's device: its GPU where there is one
  ddptrain::DistributedDataParallel ddp(net, *ctx);  // rank 0's weights to every rank
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  ddptrain::IdxDataset train(data, "train", 0.2860, 0.3530, "Fashion-MNIST");
  ddptrain::DistributedSampler sampler(
      {train.size(), ctx->world_size(), ctx->rank(), /*shuffle=*/true, /*seed=*/0});
  ddptrain::Loader loader(train, {/*batch_size=*/64, /*num_workers=*/2});
  long long step = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int epoch = 1; epoch <= 2 && step != max_steps; ++epoch) {
    sampler.set_epoch(epoch);  // a new shuffle each epoch, the same on every rank
    loader.start(sampler.indices());
    while (auto batch = loader.next()) {
      for (auto& p : net->parameters()) p.mutable_grad().reset();
      const auto loss = torch::nn::functional::cross_entropy(net->forward(batch->inputs.to(ctx->device())),
                                                             batch->targets.to(ctx->device()));
      loss.backward();  // DDP: every gradient is the mean over all ranks when this returns
      sgd.step();
      if (++step % 100 == 0 && ctx->is_main())
        std::printf("epoch %d step %lld loss %.4f\n", epoch, step, loss.item<double>());
      if (step == max_steps) break;
    }
    loader.stop();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (ctx->is_main())
    std::printf("trained %lld steps on %d ranks, %.0f samples/s\n", step, ctx->world_size(),
                static_cast<double>(step) * 64 * ctx->world_size() / s);
  ctx->shutdown();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ddp_loop: %s\n", e.what());
  return 1;
}
