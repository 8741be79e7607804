// Note [Fused cross-entropy]: fused_cross_entropy's CPU path (the reference of the CUDA
// kernel) equals the eager cross_entropy in loss and gradient, on fp32 and bf16 logits, on a
// padded vocabulary's strided view and across chunks of rows; its backward writes the
// gradient into the logits' memory; the trainer's objective uses it where asked and reads the
// accuracy before backward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <torch/nn/functional/loss.h>

#include "kernels/fused_cross_entropy.h"
#include "models/build_model.h"
#include "models/model_options.h"
#include "models/vocab_padding.h"
#include "train/optimizer.h"
#include "train/trainable.h"
#include "util/torch_compat.h"

using namespace ddptrain;

namespace {

struct Grads {
  double loss;
  at::Tensor grad;  // fp32, of the real vocabulary
};

Grads eager(const at::Tensor& logits, const at::Tensor& targets) {
  at::Tensor x = logits.detach().clone().requires_grad_();
  at::Tensor loss = torch::nn::functional::cross_entropy(x.to(at::kFloat), targets);
  loss.backward();
  return {loss.item<double>(), x.grad().to(at::kFloat)};
}

}  // namespace

TEST(FusedLoss, EqualsTheEagerLossAndGradientInFp32AndBf16) {
  struct Case {
    int64_t N, V, padded;
    at::ScalarType dtype;
  };
  // 400 rows of 50,304 columns span three chunks (8 Mi elements each).
  for (const Case& c : {Case{37, 96, 96, at::kFloat}, Case{37, 96, 128, at::kFloat},
                        Case{64, 1000, 1024, at::kBFloat16}, Case{400, 50257, 50304, at::kFloat}}) {
    at::manual_seed(5);
    const at::Tensor full = (at::randn({c.N, c.padded}) * 3).to(c.dtype);
    const at::Tensor targets = at::randint(0, c.V, {c.N}, at::kLong);
    const Grads want = eager(full.narrow(1, 0, c.V), targets);
    at::Tensor mine = full.clone().requires_grad_();
    const at::Tensor view = mine.narrow(1, 0, c.V);  // a padded vocabulary's real columns
    const at::Tensor loss = fused_cross_entropy(view, targets);
    EXPECT_EQ(loss.scalar_type(), at::kFloat);
    EXPECT_EQ(loss.dim(), 0);
    (loss * 2.0).backward();  // a scaled loss: the gradient scales with it
    const at::Tensor got = mine.grad().narrow(1, 0, c.V).to(at::kFloat) / 2.0;
    const double loss_diff = std::abs(loss.item<double>() - want.loss) / want.loss;
    const double grad_diff = (got - want.grad).abs().max().item<double>();
    const double grad_max = want.grad.abs().max().item<double>();
    std::printf(
        "N %lld V %lld (rows of %lld) %s: loss relative diff %.2g, max |grad diff| %.2g of max %.2g\n",
        static_cast<long long>(c.N), static_cast<long long>(c.V), static_cast<long long>(c.padded),
        c10::toString(c.dtype), loss_diff, grad_diff, grad_max);
    // Rounding: the two sum the exponentials in another order (by CPU: ATen's and MKL's lanes).
    // Measured at V 50257: loss 2.5e-7 relative and gradient 3.5e-6 of the largest under AVX2,
    // 6.3e-8 and 2.1e-6 on AVX-512; the bounds leave 8x room. A padded column read into the
    // log-sum-exp moves the loss by about 6e-5 and the gradient by 5e-5 of the largest.
    // bf16: stored in bf16 (8 bits of mantissa).
    EXPECT_LT(loss_diff, 2e-6);
    EXPECT_LE(grad_diff, c.dtype == at::kFloat ? 3e-5 * grad_max : grad_max / 128);
    if (c.padded > c.V) {
      EXPECT_EQ(mine.grad().narrow(1, c.V, c.padded - c.V).abs().max().item<double>(), 0.0)
          << "the padded columns got a gradient";
    }
  }
}

TEST(FusedLoss, BackwardWritesTheGradientIntoTheLogits) {
  at::manual_seed(6);
  const at::Tensor w = at::randn({16, 8}).requires_grad_();
  const at::Tensor h = at::randn({5, 8});
  const at::Tensor logits = at::linear(h, w);  // an output layer's output
  const at::Tensor targets = at::randint(0, 16, {5}, at::kLong);
  const void* memory = logits.data_ptr();
  fused_cross_entropy(logits, targets).backward();
  ASSERT_TRUE(w.grad().defined());
  // The logits now hold d loss / d logits: rows of softmax - onehot over N sum to zero.
  EXPECT_LT(logits.sum(1).abs().max().item<double>(), 1e-6);
  EXPECT_EQ(logits.data_ptr(), memory);
  const at::Tensor w2 = w.detach().clone().requires_grad_();
  torch::nn::functional::cross_entropy(at::linear(h, w2), targets).backward();
  EXPECT_LT((w.grad() - w2.grad()).abs().max().item<double>(), 1e-6) << "the weight's gradient differs";
}

// The gradient goes over the logits only where no other autograd node needs them: the output
// layers of GPT and Llama (under bf16 autocast, padded or not, tied or not) qualify; a module
// of the user's ending in log_softmax (whose backward reads its output) gets the gradient in
// memory of its own and trains as with the eager loss (before, its backward failed: "modified
// by an inplace operation").
TEST(FusedLoss, LogitsAnotherNodeNeedsKeepTheirMemory) {
  at::manual_seed(7);
  const at::Tensor w = at::randn({16, 8}).requires_grad_(), h = at::randn({5, 8}), h3 = at::randn({2, 5, 8});
  EXPECT_TRUE(gradient_may_overwrite(at::linear(h, w)));
  EXPECT_TRUE(gradient_may_overwrite(at::linear(h3, w).reshape({-1, 16})));
  EXPECT_FALSE(gradient_may_overwrite(at::log_softmax(at::linear(h, w), -1)));
  EXPECT_FALSE(gradient_may_overwrite(at::log_softmax(at::linear(h3, w), -1).reshape({-1, 16})));
  EXPECT_FALSE(gradient_may_overwrite(at::tanh(at::linear(h, w))));
  EXPECT_FALSE(gradient_may_overwrite(w)) << "a leaf";
  const at::Tensor targets = at::randint(0, 16, {5}, at::kLong);
  const at::Tensor w1 = w.detach().clone().requires_grad_(), w2 = w.detach().clone().requires_grad_();
  fused_cross_entropy(at::log_softmax(at::linear(h, w1), -1), targets).backward();
  torch::nn::functional::cross_entropy(at::log_softmax(at::linear(h, w2), -1), targets).backward();
  EXPECT_LT((w1.grad() - w2.grad()).abs().max().item<double>(), 1e-6);
  for (const ModelKind kind : {ModelKind::kGpt, ModelKind::kLlama})
    for (const bool tied : {false, true}) {
      if (kind == ModelKind::kGpt && !tied) continue;  // GPT's output layer is always tied
      ModelOptions o;
      o.model = kind;
      o.gpt_preset = GptPreset::kDebug;
      o.vocab_size = 100;
      o.vocab_multiple = 64;
      o.tie_embeddings = kind == ModelKind::kLlama && tied;
      torch::manual_seed(3);
      auto m = build_model(o, DatasetShape{});
      at::Tensor logits;
      {
        compat::AutocastGuard autocast(at::kCPU, at::kBFloat16, true);
        logits = m->forward(at::randint(0, 100, {2, 16}, at::kLong));
      }
      EXPECT_TRUE(gradient_may_overwrite(logits.reshape({-1, 100}))) << (kind == ModelKind::kGpt ? "gpt"
                                                                         : tied ? "llama tied"
                                                                                : "llama")
                                                                     << ": " << logits.grad_fn()->name();
    }
}

TEST(FusedLoss, BadShapesAndTargetsAreNamed) {
  const at::Tensor x = at::randn({4, 10});
  EXPECT_THROW(fused_cross_entropy(x, at::tensor({0, 1, 2, 10}, at::kLong)), std::exception);
  EXPECT_THROW(fused_cross_entropy(x, at::tensor({0, 1, 2}, at::kLong)), std::exception);
  EXPECT_THROW(fused_cross_entropy(x.t(), at::tensor({0, 1, 2, 3}, at::kLong)), std::exception);
}

// The objective with the fused loss trains GPT (a padded vocabulary's strided logits) as the
// eager objective does: 5 SGD steps within 1e-5.
TEST(FusedLoss, TheObjectiveTrainsGptAsTheEagerOne) {
  ModelOptions o;
  o.model = ModelKind::kGpt;
  o.gpt_preset = GptPreset::kDebug;
  o.vocab_size = 100;
  o.vocab_multiple = 64;
  OptimizerOptions sgd;  // SGD: AdamW's first steps turn gradients near 0 into steps of +-lr
  sgd.lr = 0.1;
  at::manual_seed(12);
  const at::Tensor x = at::randint(0, 100, {4, 33}, at::kLong);
  std::vector<std::vector<at::Tensor>> after;
  for (FusedLoss fused : {FusedLoss::kOff, FusedLoss::kOn}) {
    torch::manual_seed(4);
    auto m = build_model(o, DatasetShape{});
    auto opt = build_optimizer(sgd, m->parameters());
    const Objective obj = Objective::classification(fused);
    for (int step = 0; step < 5; ++step) {
      opt->zero_grad();
      const at::Tensor logits = m->forward(x.slice(1, 0, 32));
      const at::Tensor targets = x.slice(1, 1, 33);
      const at::Tensor loss = obj.loss(logits, targets);
      const at::Tensor before = logits.detach().clone();
      loss.backward();
      // The fused backward wrote the gradient over the logits: the trainer reads the accuracy
      // before backward (trainer_loop.cpp).
      EXPECT_EQ(at::equal(before, logits.detach()), fused == FusedLoss::kOff);
      opt->step();
    }
    std::vector<at::Tensor> ps;
    for (const auto& p : m->parameters()) ps.push_back(p.detach().clone());
    after.push_back(ps);
  }
  double d = 0;
  for (size_t i = 0; i < after[0].size(); ++i)
    d = std::max(d, (after[0][i] - after[1][i]).abs().max().item<double>());
  std::printf("GPT debug, 5 SGD steps: fused vs eager loss, max |weight diff| %g\n", d);
  EXPECT_LE(d, 1e-5);
}

// Note [Padded vocabulary]: the real-vocabulary view's backward hands the fused loss's
// in-place gradient on in the padded output's own memory (no zero-filled tensor, no copy),
// with the padded columns zeroed; an eager loss's gradient takes narrow's way. Both give the
// output layer the same gradient as narrow would.
TEST(FusedLoss, ThePaddedViewPassesTheInPlaceGradientOn) {
  at::manual_seed(5);
  const at::Tensor h = at::randn({6, 16}), w = at::randn({128, 16});  // 100 real rows of 128
  w.narrow(0, 100, 28).zero_();
  const at::Tensor targets = at::randint(0, 100, {6}, at::kLong);
  for (FusedLoss fused : {FusedLoss::kOff, FusedLoss::kOn}) {
    SCOPED_TRACE(fused == FusedLoss::kOn ? "fused" : "eager");
    const at::Tensor weight = w.clone().requires_grad_();
    at::Tensor padded = at::linear(h, weight);
    at::Tensor g;  // the gradient of the padded output, as the output layer's backward gets it
    padded.register_hook([&g](const at::Tensor& grad) { g = grad; });
    const void* address = padded.data_ptr();
    at::Tensor view = real_vocab_logits(padded, 100);
    EXPECT_EQ(view.sizes(), (at::IntArrayRef{6, 100}));
    EXPECT_EQ(view.data_ptr(), address) << "not a view";
    const Grads ref =
        eager(padded.detach().narrow(1, 0, 100), targets);  // before the fused loss overwrites it
    const at::Tensor loss = fused == FusedLoss::kOn ? fused_cross_entropy(view, targets)
                                                    : torch::nn::functional::cross_entropy(view, targets);
    loss.backward();
    ASSERT_TRUE(g.defined());
    EXPECT_EQ(g.data_ptr() == address, fused == FusedLoss::kOn)
        << "where the gradient of the padded output lives";
    EXPECT_EQ(g.narrow(1, 100, 28).abs().max().item<double>(), 0.0) << "the padded columns got a gradient";
    EXPECT_LE((g.narrow(1, 0, 100) - ref.grad).abs().max().item<double>(), 1e-6);
    EXPECT_LE((weight.grad() - at::matmul(at::cat({ref.grad, at::zeros({6, 28})}, 1).t(), h))
                  .abs()
                  .max()
                  .item<double>(),
              1e-5);
  }
}

// The fused forward counts the rows whose first largest logit is the target, as the
// accuracy's logits.argmax(-1).eq(targets).sum() does (ties included: the first of equal
// largest values wins), and the objective's `correct` takes that count for the output the loss
// was computed on, and reads any other output itself.
TEST(FusedLoss, CountsTheAccuracyHitsInItsForwardPass) {
  for (at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
    SCOPED_TRACE(c10::toString(dtype));
    at::manual_seed(21);
    at::Tensor x = at::randn({64, 300}).to(dtype);
    at::Tensor t = x.argmax(1);                  // every row a hit ...
    t.narrow(0, 0, 20).add_(1).remainder_(300);  // ... but 20 (at most: a tie may remain)
    // Rows 30-39: the largest value twice, the target at the later one (argmax: the first).
    for (int64_t r = 30; r < 40; ++r) {
      x[r][10] = 50, x[r][200] = 50;
      t[r] = r % 2 ? 200 : 10;
    }
    const int64_t expected = x.argmax(-1).eq(t).sum().item<int64_t>();
    const auto [loss, count] = fused_cross_entropy_and_hits(x, t);
    EXPECT_EQ(count.scalar_type(), at::kLong);
    EXPECT_EQ(count.item<int64_t>(), expected);
    EXPECT_NEAR(loss.item<double>(), eager(x, t).loss, 1e-5 * eager(x, t).loss);
  }
  // The objective: a NaN at row (0, 0)'s target makes argmax count it and the fused pass not,
  // which tells which of the two `correct` returned.
  const Objective obj = Objective::classification(FusedLoss::kOn);
  at::manual_seed(22);
  const at::Tensor logits = at::randn({2, 5, 40}), other = at::randn({2, 5, 40});
  const at::Tensor targets = at::randint(0, 40, {2, 5}, at::kLong);
  logits[0][0][targets[0][0].item<int64_t>()] = std::numeric_limits<float>::quiet_NaN();
  const int64_t argmax_count = logits.argmax(-1).eq(targets).sum().item<int64_t>();
  obj.loss(logits, targets);
  EXPECT_EQ(obj.correct(other, targets).item<int64_t>(), other.argmax(-1).eq(targets).sum().item<int64_t>())
      << "another output got the loss's count";
  EXPECT_EQ(obj.correct(logits, targets.clone()).item<int64_t>(), argmax_count) << "other targets: argmax";
  EXPECT_EQ(obj.correct(logits, targets).item<int64_t>(), argmax_count - 1) << "the loss's own count";
  EXPECT_EQ(obj.correct(logits, targets).item<int64_t>(), argmax_count) << "a count is taken once";
}

// Logits whose (B·T, V) rows are not contiguous (a scripted module's transposed product): the
// objective copies them for the fused loss, which equals the eager one (it was an error), and
// targets on another device than the logits are named. Rows that overlap (an as_strided view)
// get their gradient in a copy, not written over each other.
TEST(FusedLoss, StridedRowsAreCopiedAndOverlappingRowsAreNotWrittenInPlace) {
  at::manual_seed(3);
  const int64_t B = 2, T = 3, V = 5;
  const at::Tensor product = torch::randn({V, B * T}, torch::requires_grad());
  const at::Tensor logits = product.t().view({B, T, V});  // strides (T, 1, B·T)
  const at::Tensor targets = at::randint(0, V, {B, T});
  const Objective fused = Objective::classification(FusedLoss::kOn);
  const at::Tensor loss = fused.loss(logits, targets);
  const at::Tensor eager =
      torch::nn::functional::cross_entropy(logits.reshape({-1, V}), targets.reshape({-1}));
  EXPECT_LT((loss - eager).abs().item<double>(), 1e-6);
  const at::Tensor row = torch::randn({V + 3}, torch::requires_grad());
  const at::Tensor overlapping = (row * 1.0).as_strided({4, V}, {1, 1});  // row r: elements r..r+V-1
  const at::Tensor t4 = at::randint(0, V, {4});
  const at::Tensor g = torch::autograd::grad({fused_cross_entropy_and_hits(overlapping, t4).first}, {row})[0];
  const at::Tensor g_eager =
      torch::autograd::grad({torch::nn::functional::cross_entropy(overlapping, t4)}, {row})[0];
  EXPECT_LT((g - g_eager).abs().max().item<double>(), 1e-6);
}
