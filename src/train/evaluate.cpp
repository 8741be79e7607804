#include "train/evaluate.h"

#include <algorithm>

#include <torch/nn/functional/loss.h>

#include "data/loader.h"

namespace ddptrain {

EvalResult evaluate(Model& model, const Dataset& test, int batch_size, int num_workers, const DistContext& ctx) {
  torch::NoGradGuard no_grad;
  model.eval();
  std::vector<int64_t> mine;
  for (int64_t i = ctx.rank(); i < test.size(); i += ctx.world_size()) mine.push_back(i);
  Loader loader(test, {batch_size, num_workers, 2, /*drop_last=*/false});
  loader.start(std::move(mine));
  double loss_sum = 0, correct = 0, predictions = 0, samples = 0;
  while (auto batch = loader.next()) {
    auto logits = model.forward(batch->inputs.to(ctx.device()));
    logits = logits.reshape({-1, logits.size(-1)});  // (B, C) or (B·T, V)
    auto targets = batch->targets.to(ctx.device()).reshape({-1});
    loss_sum += torch::nn::functional::cross_entropy(
                    logits, targets, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                    .item<double>();
    correct += logits.argmax(1).eq(targets).sum().item<double>();
    predictions += static_cast<double>(targets.numel());
    samples += static_cast<double>(batch->inputs.size(0));
  }
  std::vector<at::Tensor> sums{torch::tensor({loss_sum, correct, predictions, samples}, torch::kDouble)};
  ctx.all_reduce_sum(sums, "evaluation all_reduce");
  model.train();
  const double n = std::max(sums[0][2].item<double>(), 1.0);
  return {sums[0][0].item<double>() / n, sums[0][1].item<double>() / n, static_cast<int64_t>(sums[0][3].item<double>())};
}

}  // namespace ddptrain
