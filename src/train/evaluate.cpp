#include "train/evaluate.h"

#include <algorithm>

#include <torch/nn/functional/loss.h>

#include "data/loader.h"

namespace ddptrain {

EvalResult evaluate(MiniResNet& model, const Dataset& test, int batch_size, int num_workers, const DistContext& ctx) {
  torch::NoGradGuard no_grad;
  model->eval();
  std::vector<int64_t> mine;
  for (int64_t i = ctx.rank(); i < test.size(); i += ctx.world_size()) mine.push_back(i);
  Loader loader(test, {batch_size, num_workers, 2, /*drop_last=*/false});
  loader.start(std::move(mine));
  double loss_sum = 0, correct = 0, count = 0;
  while (auto batch = loader.next()) {
    auto logits = model->forward(batch->images.to(ctx.device()));
    auto labels = batch->labels.to(ctx.device());
    loss_sum += torch::nn::functional::cross_entropy(
                    logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                    .item<double>();
    correct += logits.argmax(1).eq(labels).sum().item<double>();
    count += static_cast<double>(labels.size(0));
  }
  std::vector<at::Tensor> sums{torch::tensor({loss_sum, correct, count}, torch::kDouble)};
  ctx.all_reduce_sum(sums, "evaluation all_reduce");
  model->train();
  const double n = sums[0][2].item<double>();
  return {sums[0][0].item<double>() / std::max(n, 1.0), sums[0][1].item<double>() / std::max(n, 1.0),
          static_cast<int64_t>(n)};
}

}  // namespace ddptrain
