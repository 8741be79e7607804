#include "kernels/fused_linear.h"

#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "util/error.h"
#include "util/strings.h"
#include "util/torch_compat.h"

namespace ddptrain {

namespace fused_linear_detail {

LtGemm gelu_bias_forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const at::Tensor& g,
                         const at::Tensor& pre) {
  // g^T (O x N) = w (O x K, stored as w^T: K x O) · x^T (K x N, x's rows as columns).
  LtGemm r;
  r.m = w.size(0), r.n = x.size(0), r.k = x.size(1);
  r.a = w, r.trans_a = true, r.lda = r.k;
  r.b = x, r.trans_b = false, r.ldb = r.k;
  r.d = g, r.ldd = r.m;
  r.bias = b, r.aux = pre, r.aux_ld = r.m, r.epilogue = Epilogue::kGeluAuxBias;
  return r;
}

LtGemm weight_grad_with_bias(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& dw,
                             const at::Tensor& db) {
  // dw^T (K x O) = x^T (K x N) · dy (N x O, stored as dy^T: O x N); db sums op(B)'s rows (tokens).
  LtGemm r;
  r.m = x.size(1), r.n = dy.size(1), r.k = x.size(0);
  r.a = x, r.trans_a = false, r.lda = r.m;
  r.b = dy, r.trans_b = true, r.ldb = r.n;
  r.d = dw, r.ldd = r.m;
  r.bias = db, r.epilogue = Epilogue::kBGradB;
  return r;
}

LtGemm dgelu_input_grad(const at::Tensor& dy, const at::Tensor& w, const at::Tensor& pre,
                        const at::Tensor& dh, const at::Tensor& db) {
  // dh^T (K x N) = w^T (K x O, w's storage as is) · dy^T (O x N); aux = pre^T, db sums D's columns.
  LtGemm r;
  r.m = w.size(1), r.n = dy.size(0), r.k = w.size(0);
  r.a = w, r.trans_a = false, r.lda = r.m;
  r.b = dy, r.trans_b = false, r.ldb = r.k;
  r.d = dh, r.ldd = r.m;
  r.bias = db, r.aux = pre, r.aux_ld = r.m, r.epilogue = Epilogue::kDGeluBGrad;
  return r;
}

namespace {

// The (rows x cols) column-major matrix with leading dimension ld over t's storage.
at::Tensor column_major(const at::Tensor& t, int64_t rows, int64_t cols, int64_t ld) {
  return t.as_strided({rows, cols}, {1, ld});
}

}  // namespace

void lt_matmul_reference(const LtGemm& g) {
  const at::Tensor op_a =
      g.trans_a ? column_major(g.a, g.k, g.m, g.lda).t() : column_major(g.a, g.m, g.k, g.lda);
  const at::Tensor op_b =
      g.trans_b ? column_major(g.b, g.n, g.k, g.ldb).t() : column_major(g.b, g.k, g.n, g.ldb);
  const at::Tensor acc = op_a.to(at::kFloat).mm(op_b.to(at::kFloat));  // the fp32 accumulator, m x n
  at::Tensor out = acc;
  switch (g.epilogue) {
    case Epilogue::kNone:
      break;
    case Epilogue::kBias:
      out = acc + g.bias.to(at::kFloat).unsqueeze(1);
      break;
    case Epilogue::kGeluAuxBias: {
      const at::Tensor pre = acc + g.bias.to(at::kFloat).unsqueeze(1);
      column_major(g.aux, g.m, g.n, g.aux_ld).copy_(pre);
      out = at::gelu(pre, "tanh");
      break;
    }
    case Epilogue::kDGeluBGrad:
      out = at::gelu_backward(acc, column_major(g.aux, g.m, g.n, g.aux_ld).to(at::kFloat), "tanh");
      g.bias.copy_(out.sum(1));
      break;
    case Epilogue::kBGradB:
      g.bias.copy_(op_b.to(at::kFloat).sum(0));
      break;
  }
  column_major(g.d, g.m, g.n, g.ldd).copy_(out);
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// `g` through cuBLASLt on CUDA, `aten` (the same result by ATen's ops in the GEMM's dtype) where
// cuBLASLt has no algorithm for it or the path says so; off CUDA the reference (the CPU tests).
template <typename Aten>
void run_gemm(const LtGemm& g, GemmPath path, Aten&& aten) {
  if (path == GemmPath::kAten) return aten();
  if (!g.d.is_cuda()) return lt_matmul_reference(g);
  if (!lt_matmul(g)) aten();
}

GemmPath saved_path(AutogradContext* ctx) {
  return ctx->saved_data["aten"].toBool() ? GemmPath::kAten : GemmPath::kEpilogues;
}

// Backward writes its gradients outside autograd: no graph of them to differentiate again.
void check_no_double_backward(const char* op) {
  DDP_CHECK(!at::GradMode::is_enabled(), op,
            ": a backward with create_graph (double backward) is not supported through cuBLASLt's epilogues; "
            "run with --fused_linear off");
}

// (..., C) -> (rows, C), contiguous.
at::Tensor as_rows(const at::Tensor& t) { return t.reshape({-1, t.size(-1)}).contiguous(); }

// t's sizes with the last one replaced.
std::vector<int64_t> with_last(const at::Tensor& t, int64_t last) {
  std::vector<int64_t> s = t.sizes().vec();
  s.back() = last;
  return s;
}

// The gradients of a Linear's weight and bias from its output's gradient dy (rows, out) and its
// input x (rows, in): one GEMM with the bias's sum in its epilogue (BGRADB), or ATen's ops.
std::pair<at::Tensor, at::Tensor> weight_and_bias_grads(const at::Tensor& dy, const at::Tensor& x,
                                                        const at::Tensor& weight, GemmPath path) {
  at::Tensor dw = at::empty_like(weight), db = at::empty({weight.size(0)}, dy.options());
  run_gemm(weight_grad_with_bias(dy, x, dw, db), path, [&] {
    dw = dy.t().mm(x);
    db = dy.sum(0);
  });
  return {dw, db};
}

// See Note [Linear epilogues in cuBLASLt]: c_proj(gelu_tanh(c_fc(x))) saving what eager saves
// (x's rows, the pre-activation, the activation and the weights).
struct GeluMlp : torch::autograd::Function<GeluMlp> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w_fc,
                            const at::Tensor& b_fc, const at::Tensor& w_proj, const at::Tensor& b_proj,
                            GemmPath path) {
    ctx->saved_data["aten"] = path == GemmPath::kAten;
    const at::Tensor rows = as_rows(x);
    const int64_t N = rows.size(0), F = w_fc.size(0);
    at::Tensor act = at::empty({N, F}, rows.options()), pre = at::empty({N, F}, rows.options());
    run_gemm(gelu_bias_forward(rows, w_fc, b_fc, act, pre), path, [&] {
      pre = at::addmm(b_fc, rows, w_fc.t());
      act = at::gelu(pre, "tanh");
    });
    const at::Tensor y = at::addmm(b_proj, act, w_proj.t());  // the bias in ATen's epilogue
    ctx->save_for_backward({rows, w_fc, w_proj, pre, act});
    return y.view(with_last(x, w_proj.size(0)));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    check_no_double_backward("gelu_mlp");
    const GemmPath path = saved_path(ctx);
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &rows = saved[0], &w_fc = saved[1], &w_proj = saved[2], &pre = saved[3], &act = saved[4];
    const at::Tensor dy = as_rows(grads[0]).to(rows.scalar_type());
    const auto [dw_proj, db_proj] = weight_and_bias_grads(dy, act, w_proj, path);
    at::Tensor dh = at::empty_like(pre), db_fc = at::empty({w_fc.size(0)}, dy.options());
    run_gemm(dgelu_input_grad(dy, w_proj, pre, dh, db_fc), path, [&] {
      dh = at::gelu_backward(dy.mm(w_proj), pre, "tanh");
      db_fc = dh.sum(0);
    });
    const at::Tensor dx = dh.mm(w_fc).view(with_last(grads[0], rows.size(1)));
    return {dx, dh.t().mm(rows), db_fc, dw_proj, db_proj, at::Tensor()};
  }
};

// x · weight^T + bias, whose backward takes the bias's gradient from the weight gradient's GEMM.
struct EpilogueLinear : torch::autograd::Function<EpilogueLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, GemmPath path) {
    ctx->saved_data["aten"] = path == GemmPath::kAten;
    const at::Tensor rows = as_rows(x);
    ctx->save_for_backward({rows, weight});
    return at::addmm(bias, rows, weight.t()).view(with_last(x, weight.size(0)));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    check_no_double_backward("linear");
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &rows = saved[0], &weight = saved[1];
    const at::Tensor dy = as_rows(grads[0]).to(rows.scalar_type());
    const auto [dw, db] = weight_and_bias_grads(dy, rows, weight, saved_path(ctx));
    return {dy.mm(weight).view(with_last(grads[0], rows.size(1))), dw, db, at::Tensor()};
  }
};

// A weight (out, in) taking `in` features with a bias (out), in x's dtype on x's device.
void check_operands(const char* op, const at::Tensor& x, int64_t in, const at::Tensor& w,
                    const at::Tensor& b) {
  DDP_CHECK(w.dim() == 2 && w.size(1) == in && b.defined() && b.dim() == 1 && b.size(0) == w.size(0), op,
            ": a weight (out, ", in, ") and a bias (out), got weight ", w.sizes(),
            b.defined() ? ddptrain::str(", bias ", b.sizes()) : std::string(", no bias"));
  DDP_CHECK(x.scalar_type() == w.scalar_type() && b.scalar_type() == w.scalar_type() &&
                x.device() == w.device() && b.device() == w.device(),
            op, ": operands of one dtype on one device, got ", x.scalar_type(), ", ", w.scalar_type(), ", ",
            b.scalar_type());
}

}  // namespace

at::Tensor gelu_mlp_function(const at::Tensor& x, const at::Tensor& w_fc, const at::Tensor& b_fc,
                             const at::Tensor& w_proj, const at::Tensor& b_proj, GemmPath path) {
  DDP_CHECK(x.dim() >= 2, "gelu_mlp: x (..., features), got ", x.sizes());
  check_operands("gelu_mlp (c_fc)", x, x.size(-1), w_fc, b_fc);
  check_operands("gelu_mlp (c_proj)", x, w_fc.size(0), w_proj, b_proj);
  return GeluMlp::apply(x, w_fc.contiguous(), b_fc.contiguous(), w_proj.contiguous(), b_proj.contiguous(),
                        path);
}

at::Tensor linear_function(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           GemmPath path) {
  DDP_CHECK(x.dim() >= 2, "linear: x (..., features), got ", x.sizes());
  check_operands("linear", x, x.size(-1), weight, bias);
  return EpilogueLinear::apply(x, weight.contiguous(), bias.contiguous(), path);
}

}  // namespace fused_linear_detail

namespace {

// The dtype the epilogues would multiply x by these weights in (autocast's, else x's), where
// they serve: CUDA tensors of a build with them, bf16 or fp16, sizes cuBLASLt's 16-byte
// vectors divide, biases present.
std::optional<at::ScalarType> epilogue_dtype(const at::Tensor& x,
                                             std::initializer_list<const at::Tensor*> params) {
  if (!fused_linear_has_cuda() || !x.is_cuda() || x.dim() < 2 || x.numel() == 0) return std::nullopt;
  auto floating = [](at::ScalarType t) { return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf; };
  if (!floating(x.scalar_type())) return std::nullopt;  // autocast leaves fp64 alone, as at::linear does
  const bool autocast = compat::AutocastGuard::is_enabled(at::kCUDA);
  const at::ScalarType dt = autocast ? compat::AutocastGuard::get_dtype(at::kCUDA) : x.scalar_type();
  if (dt != at::kBFloat16 && dt != at::kHalf) return std::nullopt;
  for (const at::Tensor* p : params) {
    // Without autocast at::linear casts nothing (and names a mixed dtype): neither do the epilogues.
    if (!p->defined() || p->device() != x.device() || !floating(p->scalar_type()) ||
        (!autocast && p->scalar_type() != dt))
      return std::nullopt;
    for (int64_t s : p->sizes())
      if (s % 8 != 0) return std::nullopt;
    // A parameter in dt already is used as it is (no cast makes a fresh, aligned copy): the
    // epilogues' bias pointer is not in the heuristic's alignment, so an offset view (a ZeRO-3
    // flat buffer's) goes through at::linear.
    if (p->scalar_type() == dt && reinterpret_cast<uintptr_t>(p->data_ptr()) % 16 != 0) return std::nullopt;
  }
  return dt;
}

// t as the GEMM takes it: autocast's cast (its cache of cast weights included), as at::linear
// casts its operands; without autocast the operands are in dt already (epilogue_dtype).
at::Tensor in_dtype(const at::Tensor& t, at::ScalarType dt) {
  return compat::AutocastGuard::is_enabled(at::kCUDA) ? at::autocast::cached_cast(dt, t, at::kCUDA) : t;
}

}  // namespace

at::Tensor linear_with_epilogues(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  const auto dt = epilogue_dtype(x, {&weight, &bias});
  if (!dt || x.size(-1) != weight.size(1)) return at::linear(x, weight, bias);
  return fused_linear_detail::linear_function(in_dtype(x, *dt), in_dtype(weight, *dt), in_dtype(bias, *dt));
}

at::Tensor gelu_mlp_with_epilogues(const at::Tensor& x, const at::Tensor& w_fc, const at::Tensor& b_fc,
                                   const at::Tensor& w_proj, const at::Tensor& b_proj, bool gelu_tanh) {
  const char* approximate = gelu_tanh ? "tanh" : "none";
  const auto dt = epilogue_dtype(x, {&w_fc, &b_fc, &w_proj, &b_proj});
  if (!dt) return at::linear(at::gelu(at::linear(x, w_fc, b_fc), approximate), w_proj, b_proj);
  if (!gelu_tanh)  // cuBLASLt's GELU is the tanh form: the bias gradients alone
    return linear_with_epilogues(at::gelu(linear_with_epilogues(x, w_fc, b_fc), approximate), w_proj, b_proj);
  return fused_linear_detail::gelu_mlp_function(in_dtype(x, *dt), in_dtype(w_fc, *dt), in_dtype(b_fc, *dt),
                                                in_dtype(w_proj, *dt), in_dtype(b_proj, *dt));
}

}  // namespace ddptrain
