// Note [Linear epilogues in cuBLASLt]: the three cuBLASLt calls are described in cuBLASLt's
// column-major terms from row-major requests; lt_matmul_reference computes what cuBLASLt's
// documentation says such a call computes, so on CPU each description must give the row-major
// product it stands for (a wrong transpose, leading dimension or bias side gives another result
// or reads outside the tensors). The autograd Functions built on them, run through the
// reference, equal ATen's ops forward and backward; GPT with --fused_linear auto runs ATen's
// ops themselves off CUDA (bitwise as off); the flag belongs to gpt.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/functional/loss.h>

#include "bf16_step.h"
#include "data/data_options.h"
#include "kernels/fused_linear.h"
#include "models/build_model.h"
#include "models/model_options.h"
#include "util/error.h"
#include "util/torch_compat.h"

using namespace ddptrain;
using namespace ddptrain::fused_linear_detail;

namespace {

// |a - b| <= 1e-5 of b's largest magnitude (fp32 sums in another order).
void expect_close(const at::Tensor& a, const at::Tensor& b, const std::string& what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  const double top = b.abs().max().item<double>(), diff = (a - b).abs().max().item<double>();
  EXPECT_GT(top, 0) << what << ": all zeros compare nothing";
  EXPECT_LE(diff, 1e-5 * top) << what << ": max |diff| " << diff << " of " << top;
}

}  // namespace

TEST(FusedLinear, TheDescriptionsComputeTheirRowMajorProducts) {
  // Sizes all distinct, so a dimension or leading dimension taken for another shows.
  const int64_t N = 12, K = 16, O = 24;
  at::manual_seed(21);
  const at::Tensor x = at::randn({N, K}), w = at::randn({O, K}), b = at::randn({O}), dy = at::randn({N, O});
  {
    at::Tensor g = at::empty({N, O}), pre = at::empty({N, O});
    const LtGemm d = gelu_bias_forward(x, w, b, g, pre);
    EXPECT_EQ(d.epilogue, Epilogue::kGeluAuxBias);
    lt_matmul_reference(d);
    const at::Tensor want = at::addmm(b, x, w.t());
    expect_close(pre, want, "GELU_AUX_BIAS: the pre-activation");
    expect_close(g, at::gelu(want, "tanh"), "GELU_AUX_BIAS: the activation");
  }
  {
    at::Tensor dw = at::empty({O, K}), db = at::empty({O});
    const LtGemm d = weight_grad_with_bias(dy, x, dw, db);
    EXPECT_EQ(d.epilogue, Epilogue::kBGradB);
    lt_matmul_reference(d);
    expect_close(dw, dy.t().mm(x), "BGRADB: the weight gradient");
    expect_close(db, dy.sum(0), "BGRADB: the bias gradient");
  }
  {
    // c_proj's input gradient: dy (N, O) through its weight (O, K) into the pre-activation (N, K).
    const at::Tensor pre = at::randn({N, K});
    at::Tensor dh = at::empty({N, K}), db = at::empty({K});
    const LtGemm d = dgelu_input_grad(dy, w, pre, dh, db);
    EXPECT_EQ(d.epilogue, Epilogue::kDGeluBGrad);
    lt_matmul_reference(d);
    const at::Tensor want = at::gelu_backward(dy.mm(w), pre, "tanh");
    expect_close(dh, want, "DGELU_BGRAD: the pre-activation's gradient");
    expect_close(db, want.sum(0), "DGELU_BGRAD: the bias gradient");
  }
}

namespace {

void functions_equal_aten_ops(GemmPath path) {
  const int64_t B = 3, T = 5, C = 16, F = 40;
  at::manual_seed(22);
  const std::vector<at::Tensor> init{at::randn({B, T, C}), at::randn({F, C}) * 0.3, at::randn({F}),
                                     at::randn({C, F}) * 0.3, at::randn({C})};
  const at::Tensor dy = at::randn({B, T, C});
  auto leaves = [&] {
    std::vector<at::Tensor> v;
    for (const auto& t : init) v.push_back(t.clone().requires_grad_());
    return v;
  };
  {
    auto mine = leaves(), ref = leaves();
    const at::Tensor y = gelu_mlp_function(mine[0], mine[1], mine[2], mine[3], mine[4], path);
    const at::Tensor r = at::linear(at::gelu(at::linear(ref[0], ref[1], ref[2]), "tanh"), ref[3], ref[4]);
    EXPECT_NE(std::string(y.grad_fn()->name()).find("GeluMlp"), std::string::npos) << y.grad_fn()->name();
    expect_close(y, r, "the MLP's output");
    y.backward(dy);
    r.backward(dy);
    const char* names[] = {"dx", "dw_fc", "db_fc", "dw_proj", "db_proj"};
    for (size_t i = 0; i < mine.size(); ++i) expect_close(mine[i].grad(), ref[i].grad(), names[i]);
  }
  {
    auto mine = leaves(), ref = leaves();
    const at::Tensor y = linear_function(mine[0], mine[1], mine[2], path);
    const at::Tensor r = at::linear(ref[0], ref[1], ref[2]);
    EXPECT_NE(std::string(y.grad_fn()->name()).find("EpilogueLinear"), std::string::npos);
    expect_close(y, r, "the Linear's output");
    const at::Tensor dlin = at::randn({B, T, F});
    y.backward(dlin);
    r.backward(dlin);
    const char* names[] = {"dx", "dweight", "dbias"};
    for (size_t i = 0; i < 3; ++i) expect_close(mine[i].grad(), ref[i].grad(), names[i]);
  }
}

}  // namespace

// Both paths of the Functions: the epilogue GEMMs (through the reference off CUDA) and the ATen
// ops standing in where cuBLASLt has no algorithm.
TEST(FusedLinear, TheFunctionsEqualAtenOpsForwardAndBackward) {
  for (GemmPath path : {GemmPath::kEpilogues, GemmPath::kAten}) {
    SCOPED_TRACE(path == GemmPath::kAten ? "the ATen stand-ins" : "the epilogues");
    functions_equal_aten_ops(path);
  }
}

TEST(FusedLinear, BadOperandsAreNamed) {
  const at::Tensor x = at::randn({4, 16}), w = at::randn({24, 16}), b = at::randn({24});
  try {
    linear_function(x, at::randn({24, 8}), b);
    FAIL() << "a weight of 8 inputs for 16 features was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a weight (out, 16)"), std::string::npos) << e.what();
  }
  try {
    gelu_mlp_function(x, w, b, at::randn({16, 24}), at::randn({16}).to(at::kDouble));
    FAIL() << "a double bias among floats was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gelu_mlp (c_proj): operands of one dtype"), std::string::npos)
        << e.what();
  }
}

// Off CUDA the public functions are at::linear and at::gelu themselves: GPT with --fused_linear
// auto under bf16 CPU autocast gives the same loss and gradients, bit for bit, as with off.
TEST(FusedLinear, OffCudaGptTrainsBitwiseAsWithItOff) {
  for (GptActivation act : {GptActivation::kGeluTanh, GptActivation::kGelu}) {
    SCOPED_TRACE(word(act));
    std::vector<bf16_step::StepResult> steps;
    for (FusedLinear mode : {FusedLinear::kOff, FusedLinear::kAuto}) {
      ModelOptions o;
      o.model = ModelKind::kGpt;
      o.gpt_preset = GptPreset::kDebug;
      o.vocab_size = 100;
      o.gpt_activation = act;
      o.fused_linear = mode;
      at::manual_seed(23);
      const at::Tensor tokens = at::randint(0, 100, {3, 33}, at::kLong);
      auto model = build_model(o, DatasetShape{});
      steps.push_back(bf16_step::bf16_step(*model, tokens, 100,
                                           [&](const at::Tensor& inputs) { return model->forward(inputs); }));
    }
    bf16_step::expect_bitwise_equal(steps[0], steps[1]);
  }
}

TEST(FusedLinear, TheFlagIsGpts) {
  ModelOptions o;
  o.model = ModelKind::kLlama;
  o.fused_linear = FusedLinear::kAuto;
  DataOptions tokens;
  tokens.dataset = DatasetKind::kTokens;
  try {
    o.validate(tokens);
    FAIL() << "--fused_linear was taken for llama";
  } catch (const OptionError& e) {
    EXPECT_NE(std::string(e.what()).find("fused_linear"), std::string::npos) << e.what();
  }
  o.model = ModelKind::kGpt;
  EXPECT_NO_THROW(o.validate(tokens));
}

// Backward writes its gradients outside autograd, so a graph of them (create_graph) is refused
// by name, not differentiated wrongly.
TEST(FusedLinear, DoubleBackwardIsRefused) {
  const at::Tensor x = at::randn({4, 16}).requires_grad_(), w = at::randn({24, 16}), b = at::randn({24});
  const at::Tensor y = linear_function(x, w, b).sum();
  try {
    torch::autograd::grad({y}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true);
    FAIL() << "a double backward ran through the epilogues";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("double backward"), std::string::npos) << e.what();
  }
}
