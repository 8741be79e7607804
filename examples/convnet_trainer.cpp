// (a) Your own convnet on Fashion-MNIST, trained by ddptrain's Trainer: DDP, checkpoints and
// resume, evaluation, the agreed stop on Ctrl-C, metrics. On 2 processes:
//   ddptrain launch --nproc_per_node 2 ./convnet_trainer [DATA_DIR [MAX_STEPS]]
#include <cstdio>
#include <cstdlib>
#include <string>

#include <ddptrain/ddptrain.h>
#include <torch/torch.h>

struct ConvNet : torch::nn::Module {
  ConvNet() {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)));
    fc = register_module("fc", torch::nn::Linear(32 * 7 * 7, 10));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::max_pool2d(torch::relu(conv1(x)), 2);
    h = torch::max_pool2d(torch::relu(conv2(h)), 2);
    return fc(h.flatten(1));
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc{nullptr};
};

int main(int argc, char** argv) try {
  const std::string data = argc > 1 ? argv[1] : ddptrain::kFashionMnistDir;
  ddptrain::install_stop_handlers();          // SIGINT/SIGTERM: every rank stops after the same step
  ddptrain::install_cpu_memory_accounting();  // before any tensor: the peak memory per epoch on CPU
  torch::manual_seed(0);                      // the same initial weights on every rank
  ddptrain::DistOptionsResolved dist;
  // Another rank's error ends this one within seconds (on NCCL it would wait in its next
  // collective until the timeout); this rank announces its own (below).
  dist.on_peer_failure = [](const std::string& first) {
    std::fprintf(stderr, "convnet_trainer: the job failed first on %s\n", first.c_str());
    std::_Exit(1);
  };
  auto ctx = ddptrain::join(dist);
  auto net = std::make_shared<ConvNet>();
  net->to(ctx->device());  // the rank's device: its GPU where there is one
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  ddptrain::IdxDataset train(data, "train", 0.2860, 0.3530, "Fashion-MNIST");
  ddptrain::IdxDataset test(data, "t10k", 0.2860, 0.3530, "Fashion-MNIST");

  ddptrain::TrainerOptions opts;
  opts.loop.epochs = 2;
  opts.data.batch_size = 64;  // per rank
  opts.loop.max_steps = argc > 2 ? std::stoll(argv[2]) : 0;
  opts.optim.lr_schedule = ddptrain::LrSchedule::kEpochCosine;
  opts.checkpoint.dir = "convnet_checkpoints";
  opts.report.metrics_file = "convnet_metrics.jsonl";
  opts.stop_requested = ddptrain::stop_signal;
  opts.checkpoint.resume_from = "auto";  // this run's newest checkpoint there, if any

  ddptrain::Trainer trainer(*ctx, ddptrain::trainable(net), sgd, opts);
  ddptrain::TrainResult r;
  try {
    r = trainer.fit(train, &test);
  } catch (const std::exception& e) {  // this run ends: the other ranks end too
    ctx->announce_failure(e.what(), dynamic_cast<const ddptrain::CollectiveError*>(&e) != nullptr);
    throw;
  }
  if (ctx->is_main() &&
      r.evaluated)  // a resume with nothing left to train evaluates nothing (the log says why)
    std::printf("test accuracy %.4f after %lld steps\n", r.test_accuracy,
                static_cast<long long>(r.global_step));
  ctx->shutdown();
  return ddptrain::stop_exit_code(r, *ctx);  // 128 + signal, said to the launcher
} catch (const ddptrain::UsageError& e) {    // exit 2: launch does not restart a run of bad options
  std::fprintf(stderr, "convnet_trainer: %s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "convnet_trainer: %s\n", e.what());
  return 1;
}
