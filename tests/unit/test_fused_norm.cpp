// Note [LayerNorm into the autocast dtype]: layer_norm_to's CPU path (the reference of the CUDA
// kernels in tests/cuda) is ATen's LayerNorm followed by the cast, bitwise, forward and
// backward; GPT with --fused_norm on trains bitwise as with ATen's LayerNorm under bf16
// autocast (autocast keeps LayerNorm in fp32 and casts its output for the next Linear: the
// same arithmetic); rms_norm_to likewise for Llama's RMSNorm; bad inputs are named.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>

#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/functional/loss.h>

#include "bf16_step.h"
#include "data/data_options.h"
#include "kernels/fused_layer_norm.h"
#include "models/build_model.h"
#include "models/llama.h"
#include "models/model_options.h"
#include "op_counts.h"
#include "util/error.h"
#include "util/torch_compat.h"

using namespace ddptrain;

TEST(FusedNorm, TheCpuPathIsLayerNormThenTheCast) {
  for (at::ScalarType out : {at::kBFloat16, at::kFloat}) {
    SCOPED_TRACE(c10::toString(out));
    at::manual_seed(4);
    const at::Tensor x0 = at::randn({3, 5, 128}) * 3 + 1, w0 = at::randn({128}), b0 = at::randn({128});
    const at::Tensor dy = at::randn({3, 5, 128}).to(out);
    std::vector<at::Tensor> mine{x0.clone().requires_grad_(), w0.clone().requires_grad_(),
                                 b0.clone().requires_grad_()};
    std::vector<at::Tensor> ref{x0.clone().requires_grad_(), w0.clone().requires_grad_(),
                                b0.clone().requires_grad_()};
    const at::Tensor y = layer_norm_to(mine[0], mine[1], mine[2], 1e-5, out);
    const at::Tensor r = at::layer_norm(ref[0], {128}, ref[1], ref[2], 1e-5).to(out);
    EXPECT_EQ(y.scalar_type(), out);
    EXPECT_EQ(y.sizes(), x0.sizes());
    EXPECT_TRUE(at::equal(y, r));
    y.backward(dy);
    r.backward(dy);
    for (size_t i = 0; i < mine.size(); ++i)
      EXPECT_TRUE(at::equal(mine[i].grad(), ref[i].grad())) << "input " << i;
  }
}

namespace {

// o's model (a debug-sized decoder) with --fused_norm off, then on: one forward under bf16 CPU
// autocast (through `forward`, which may check what the setting changed) and one backward; the
// losses and every parameter's gradient are bitwise equal.
void trains_bitwise_as_with_fused_norm_off(
    ModelOptions o, const std::function<at::Tensor(Model&, FusedNorm, const at::Tensor&)>& forward) {
  o.gpt_preset = GptPreset::kDebug;
  o.vocab_size = 100;
  at::manual_seed(6);
  const at::Tensor x = at::randint(0, 100, {3, 33}, at::kLong);
  std::vector<bf16_step::StepResult> steps;
  for (FusedNorm fused : {FusedNorm::kOff, FusedNorm::kOn}) {
    o.fused_norm = fused;
    torch::manual_seed(2);
    auto m = build_model(o, DatasetShape{});
    steps.push_back(bf16_step::bf16_step(
        *m, x, 100, [&](const at::Tensor& inputs) { return forward(*m, fused, inputs); }));
  }
  bf16_step::expect_bitwise_equal(steps[0], steps[1]);
}

}  // namespace

TEST(FusedNorm, GptTrainsBitwiseAsWithAtenLayerNormUnderAutocast) {
  ModelOptions o;
  o.model = ModelKind::kGpt;
  trains_bitwise_as_with_fused_norm_off(o, [](Model& m, FusedNorm fused, const at::Tensor& tokens) {
    at::Tensor logits;
    // aten::layer_norm: the modules' own forward. 2 blocks x 2 and the final one: all ATen's,
    // or all fused.
    std::map<std::string, int> ops = testing_ops::aten_ops_during([&] { logits = m.forward(tokens); });
    EXPECT_EQ(ops["aten::layer_norm"], fused == FusedNorm::kOn ? 0 : 5);
    return logits;
  });
}

// The residual add joined to the norm: on the CPU the add and the norm's CPU path, bitwise,
// with the sum's own gradient and a bf16 branch's.
TEST(FusedNorm, TheAddAndNormCpuPathIsTheAddThenTheNorm) {
  at::manual_seed(5);
  const at::Tensor x0 = at::randn({3, 5, 128}), branch0 = at::randn({3, 5, 128}).to(at::kBFloat16);
  const at::Tensor w0 = at::randn({128}), b0 = at::randn({128});
  const at::Tensor dy = at::randn({3, 5, 128}).to(at::kBFloat16), dh = at::randn({3, 5, 128});
  for (bool rms : {false, true}) {
    SCOPED_TRACE(rms ? "rms" : "layer norm");
    std::vector<std::vector<at::Tensor>> grads;
    std::vector<at::Tensor> outs;
    for (bool fused : {true, false}) {
      std::vector<at::Tensor> in{x0.clone().requires_grad_(), branch0.clone().requires_grad_(),
                                 w0.clone().requires_grad_(), b0.clone().requires_grad_()};
      at::Tensor h, y;
      if (fused) {
        std::tie(h, y) = rms ? add_rms_norm_to(in[0], in[1], in[2], 1e-6, at::kBFloat16)
                             : add_layer_norm_to(in[0], in[1], in[2], in[3], 1e-5, at::kBFloat16);
      } else {
        h = in[0] + in[1];
        y = rms ? rms_norm_to(h, in[2], 1e-6, at::kBFloat16)
                : layer_norm_to(h, in[2], in[3], 1e-5, at::kBFloat16);
      }
      EXPECT_EQ(h.scalar_type(), at::kFloat);
      EXPECT_EQ(y.scalar_type(), at::kBFloat16);
      torch::autograd::backward({y, h}, {dy, dh});
      outs.push_back(h.detach());
      outs.push_back(y.detach());
      std::vector<at::Tensor> g;
      for (size_t i = 0; i < (rms ? 3u : 4u); ++i) g.push_back(in[i].grad());
      grads.push_back(g);
    }
    EXPECT_TRUE(at::equal(outs[0], outs[2]));
    EXPECT_TRUE(at::equal(outs[1], outs[3]));
    EXPECT_EQ(grads[0][1].scalar_type(), at::kBFloat16);
    for (size_t i = 0; i < grads[0].size(); ++i)
      EXPECT_TRUE(at::equal(grads[0][i], grads[1][i])) << "input " << i;
  }
}

TEST(FusedNorm, TheRmsCpuPathIsLlamasRmsNormThenTheCast) {
  for (at::ScalarType out : {at::kBFloat16, at::kFloat}) {
    SCOPED_TRACE(c10::toString(out));
    at::manual_seed(4);
    const at::Tensor x0 = at::randn({3, 5, 128}) * 3 + 1, w0 = at::randn({128});
    const at::Tensor dy = at::randn({3, 5, 128}).to(out);
    LlamaRmsNorm norm(128, 1e-6);
    {
      torch::NoGradGuard no_grad;
      norm->weight.copy_(w0);
    }
    std::vector<at::Tensor> mine{x0.clone().requires_grad_(), w0.clone().requires_grad_()};
    const at::Tensor xr = x0.clone().requires_grad_();
    const at::Tensor y = rms_norm_to(mine[0], mine[1], 1e-6, out);
    const at::Tensor r = norm(xr).to(out);
    EXPECT_EQ(y.scalar_type(), out);
    EXPECT_EQ(y.sizes(), x0.sizes());
    EXPECT_TRUE(at::equal(y, r));
    y.backward(dy);
    r.backward(dy);
    EXPECT_TRUE(at::equal(mine[0].grad(), xr.grad()));
    EXPECT_TRUE(at::equal(mine[1].grad(), norm->weight.grad()));
  }
}

// With --fused_norm on, Llama's RMSNorms write the autocast dtype (the fused path ran) and the
// model trains bitwise as with its own RMSNorm, whose fp32 output autocast casts for the Linear.
TEST(FusedNorm, LlamaTrainsBitwiseAsWithItsOwnRmsNormUnderAutocast) {
  ModelOptions o;
  o.model = ModelKind::kLlama;
  trains_bitwise_as_with_fused_norm_off(o, [](Model& m, FusedNorm fused, const at::Tensor& tokens) {
    auto& llama = dynamic_cast<LlamaImpl&>(m);
    EXPECT_EQ(llama.norm(at::randn({2, llama.config().n_embd})).scalar_type(),
              fused == FusedNorm::kOn ? at::kBFloat16 : at::kFloat);
    return m.forward(tokens);
  });
}

namespace {

// The dtypes of each unit's outputs, as a sharder sees them (ddp/units.h).
class OutputsPerUnit : public UnitHooks {
 public:
  void before_forward(size_t) override {}
  void after_forward(size_t unit, const std::vector<at::Tensor>& outputs) override {
    if (seen.size() <= unit) seen.resize(unit + 1);
    for (const auto& t : outputs) seen[unit].push_back(t.scalar_type());
  }
  std::vector<std::vector<at::ScalarType>> seen;
};

}  // namespace

// Note [Residual add in the next norm]: under --fused_norm a GPT block (a Llama layer) hands
// the next its stream with the last residual add undone, {x in fp32, the MLP's branch in the
// autocast dtype}, and a sharder's hooks see both tensors; a recomputed block hands one, the
// sum (the last block is never recomputed). The logits are bitwise those of --fused_norm off,
// where the next norm does the add in ATen's ops (FusedNorm.*TrainsBitwise* above: the
// gradients too; HfGpt2.* and HfLlama.* compare the whole model's logits with transformers').
TEST(FusedNorm, EachBlockLeavesItsResidualAddToTheNextNorm) {
  using Dtypes = std::vector<at::ScalarType>;
  const Dtypes pending{at::kFloat, at::kBFloat16}, summed{at::kFloat};
  for (ModelKind kind : {ModelKind::kGpt, ModelKind::kLlama}) {
    for (Recompute recompute : {Recompute::kNone, Recompute::kBlocks}) {
      SCOPED_TRACE(ddptrain::str(word(kind), recompute == Recompute::kBlocks ? " recomputed" : ""));
      ModelOptions o;
      o.model = kind;
      o.gpt_preset = GptPreset::kDebug;
      o.vocab_size = 100;
      o.activation_checkpointing = recompute;
      at::manual_seed(3);
      const at::Tensor tokens = at::randint(0, 100, {2, 16}, at::kLong);
      std::vector<at::Tensor> logits;
      std::vector<Dtypes> blocks;
      for (FusedNorm fused : {FusedNorm::kOn, FusedNorm::kOff}) {
        o.fused_norm = fused;
        torch::manual_seed(4);
        auto m = build_model(o, DatasetShape{});
        OutputsPerUnit hooks;
        m->units().set_hooks(&hooks);
        {
          compat::AutocastGuard autocast(at::kCPU, at::kBFloat16, true);
          logits.push_back(m->forward(tokens));
        }
        m->units().set_hooks(nullptr);
        if (fused == FusedNorm::kOff) continue;
        for (size_t u = 0; u < hooks.seen.size(); ++u) {
          const std::string& name = m->units().name(u);
          if (name.rfind("h.", 0) == 0 || name.rfind("layers.", 0) == 0) blocks.push_back(hooks.seen[u]);
        }
      }
      ASSERT_EQ(blocks.size(), 2u);
      EXPECT_EQ(blocks[0], recompute == Recompute::kBlocks ? summed : pending);
      EXPECT_EQ(blocks[1], pending);
      EXPECT_TRUE(at::equal(logits[0], logits[1]));
    }
  }
}

TEST(FusedNorm, BadInputsAreNamed) {
  const at::Tensor w = at::ones({8}), b = at::zeros({8});
  EXPECT_THROW(layer_norm_to(at::ones({2, 8}, at::kBFloat16), w, b, 1e-5, at::kBFloat16), std::exception);
  EXPECT_THROW(layer_norm_to(at::ones({2, 7}), w, b, 1e-5, at::kBFloat16), std::exception);
  EXPECT_THROW(layer_norm_to(at::ones({2, 8}), w, at::Tensor(), 1e-5, at::kBFloat16), std::exception);
  EXPECT_THROW(rms_norm_to(at::ones({2, 8}, at::kBFloat16), w, 1e-5, at::kBFloat16), std::exception);
  EXPECT_THROW(rms_norm_to(at::ones({2, 7}), w, 1e-5, at::kBFloat16), std::exception);
  EXPECT_THROW(rms_norm_to(at::ones({2, 8}), at::Tensor(), 1e-5, at::kBFloat16), std::exception);
  EXPECT_THROW(add_layer_norm_to(at::ones({2, 8}), at::ones({3, 8}), w, b, 1e-5, at::kBFloat16),
               std::exception);
  EXPECT_THROW(add_rms_norm_to(at::ones({2, 8}), at::ones({2, 8}), at::ones({7}), 1e-5, at::kBFloat16),
               std::exception);
  ModelOptions resnet;
  resnet.model = ModelKind::kMiniResnet;
  resnet.fused_norm = FusedNorm::kOn;
  try {
    resnet.validate(DataOptions{});
    ADD_FAILURE() << "--fused_norm on --model mini_resnet was accepted";
  } catch (const OptionError& e) {
    EXPECT_NE(std::string(e.what()).find("applies to"), std::string::npos) << e.what();
  }
}
