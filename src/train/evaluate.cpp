#include "train/evaluate.h"

#include <algorithm>

#include <torch/nn/functional/loss.h>

#include "data/loader.h"
#include "obs/logger.h"
#include "train/stop_vote.h"
#include "train/training_modes.h"
#include "util/clock.h"
#include "util/error.h"

namespace ddptrain {
namespace {

constexpr double kProgressEvery_s = 10;  // a progress line at most this often

}  // namespace

EvalResult evaluate(const Trainable& model, const Objective& objective, const Dataset& test,
                    const EvalOptions& opts, const DistContext& ctx) {
  // The same options on every rank: each throws before any collective.
  check_option_positive(opts.batch_size, "batch_size", "pass e.g. {0:64}", "EvalOptions");
  check_option_non_negative(opts.num_workers, "num_workers", "pass {0:0} to load in this thread",
                            "EvalOptions");
  torch::NoGradGuard no_grad;
  const TrainingModes modes(*model.module);  // Note [Each module keeps its mode]
  model.module->eval();
  std::vector<int64_t> mine;
  for (int64_t i = ctx.rank(); i < test.size(); i += ctx.world_size()) mine.push_back(i);
  const auto per_rank = static_cast<int64_t>(mine.size());
  // As many samples on every rank (see the header): the last ones beyond per_rank count nowhere.
  const int64_t share = (test.size() + ctx.world_size() - 1) / ctx.world_size();
  while (static_cast<int64_t>(mine.size()) < share) mine.push_back(0);
  ctx.log().info(str("evaluation starts: ", test.size(), " test samples, ", per_rank,
                     " on this rank, batches of ", opts.batch_size));
  Loader loader(test, {opts.batch_size, opts.num_workers, 2, /*drop_last=*/false});
  loader.start(std::move(mine));
  const auto t0 = Clock::now();
  auto last_report = t0;
  double loss_sum = 0, correct = 0, predictions = 0, samples = 0;
  int64_t read = 0;                         // samples of `mine` taken so far
  StopVote vote(ctx, opts.stop_requested);  // Note [Agreed stop]: a blocking vote after each batch
  StopRequest stop;
  while (auto batch = loader.next()) {
    if (objective.check_targets) objective.check_targets(batch->targets);
    at::Tensor output = model.forward(batch->inputs.to(ctx.device()));
    at::Tensor targets = batch->targets.to(ctx.device());
    const int64_t rows = batch->inputs.size(0), counted = std::clamp<int64_t>(per_rank - read, 0, rows);
    read += rows;
    if (counted < rows) output = output.narrow(0, 0, counted), targets = targets.narrow(0, 0, counted);
    if (counted > 0) {
      const double n = objective.count ? objective.count(output, targets).item<double>()
                                       : static_cast<double>(targets.numel());
      if (n > 0) loss_sum += objective.loss(output, targets).item<double>() * n;  // none: adds nothing
      if (objective.correct) correct += objective.correct(output, targets).item<double>();
      predictions += n;
      samples += static_cast<double>(counted);
    }
    // A stop request (on any rank) ends it here on every rank; each still meets the one
    // reduction below.
    if ((stop = vote.agreed_now())) break;
    if (seconds_since(last_report) >= kProgressEvery_s) {
      last_report = Clock::now();
      ctx.log().info(str("evaluation: ", static_cast<int64_t>(samples), "/", per_rank,
                         " samples on this rank, ", fmt("%.0f", seconds_since(t0)), " s"));
    }
  }
  loader.stop();
  std::vector<at::Tensor> sums{
      torch::tensor({loss_sum, correct, predictions, samples, stop ? 1.0 : 0.0}, torch::kDouble)};
  ctx.all_reduce_sum(sums, "evaluation all_reduce");
  modes.restore();
  const double n = std::max(sums[0][2].item<double>(), 1.0);
  EvalResult r{sums[0][0].item<double>() / n,
               objective.correct ? sums[0][1].item<double>() / n : -1.0,
               static_cast<int64_t>(sums[0][3].item<double>()),
               sums[0][4].item<double>() > 0,
               stop,
               seconds_since(t0)};
  ctx.log().info(str("evaluation ", r.interrupted ? "interrupted by a signal after " : "took ",
                     r.interrupted ? str(r.samples, " samples, ") : "", fmt("%.1f", r.seconds), " s"));
  return r;
}

EvalResult evaluate(const std::shared_ptr<Model>& model, const Dataset& test, const EvalOptions& opts,
                    const DistContext& ctx, const Objective& objective) {
  return evaluate(trainable(model), objective, test, opts, ctx);
}

}  // namespace ddptrain
