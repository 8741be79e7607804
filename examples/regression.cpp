// (c) A dataset of your own and a loss that is not classification: regression with MSE.
// A Dataset needs only size() and get(i); an Objective is the loss (and, optionally, a count
// of correct predictions: none here, so no accuracy is reported).
//   ddptrain launch --nproc_per_node 2 ./regression
#include <cmath>
#include <cstdio>

#include <ddptrain/ddptrain.h>
#include <torch/torch.h>

// y = sin(3 x0) + x1^2 - x2 x3, from 4 features that are a pure function of the index.
class Curve : public ddptrain::Dataset {
 public:
  Curve(int64_t n, int64_t offset) : n_(n), offset_(offset) {}
  int64_t size() const override { return n_; }
  ddptrain::Example get(int64_t i) const override {
    const auto x = torch::sin(torch::arange(1, 5, torch::kFloat) * static_cast<double>(i + offset_) * 0.731);
    const auto a = x.accessor<float, 1>();
    return {x, torch::tensor({std::sin(3 * a[0]) + a[1] * a[1] - a[2] * a[3]})};
  }

 private:
  int64_t n_, offset_;
};

int main() try {
  torch::manual_seed(0);
  auto ctx = ddptrain::join();
  auto mlp = torch::nn::Sequential(torch::nn::Linear(4, 64), torch::nn::Tanh(), torch::nn::Linear(64, 1));
  mlp->to(ctx->device());  // the rank's device: its GPU where there is one
  torch::optim::AdamW adamw(mlp->parameters(), torch::optim::AdamWOptions(3e-3));
  Curve train(4096, 0), test(512, 1000000);

  ddptrain::Objective mse;
  mse.loss = [](const torch::Tensor& out, const torch::Tensor& y) { return torch::mse_loss(out, y); };
  ddptrain::TrainerOptions opts;
  opts.loop.epochs = 5;
  opts.data.batch_size = 32;
  opts.data.num_workers = 0;
  opts.checkpoint.dir = "";  // no checkpoints
  opts.report.log_interval = 50;
  opts.optim.lr_schedule = ddptrain::LrSchedule::kStepCosine;

  ddptrain::Trainer trainer(*ctx, ddptrain::trainable(mlp), adamw, opts, mse);
  const ddptrain::TrainResult r = trainer.fit(train, &test);
  if (ctx->is_main()) std::printf("test mse %.5f (train %.5f)\n", r.test_loss, r.train_loss);
  ctx->shutdown();
  return 0;
} catch (const ddptrain::UsageError& e) {  // a bad option or environment: 2, which launchers do not restart
  std::fprintf(stderr, "regression: %s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "regression: %s\n", e.what());
  return 1;
}
