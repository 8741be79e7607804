// cuBLASLt's epilogues for Note [Linear epilogues in cuBLASLt] (kernels/fused_linear.h): one
// cublasLtMatmul per LtGemm on torch's own Lt handle, current stream and Lt workspace, so it
// orders with ATen's work on that stream and shares its workspace as ATen's GEMMs do.
//
// The cuBLASLt functions are those of the libcublasLt that libtorch_cuda loaded, looked up in
// the process rather than linked: the same release as torch's GEMMs (pip's torch carries its
// own, which may be newer than a CUDA toolkit's), and no second copy of the library on the link
// line, whose directory would contend with the toolkit's libcudart in the binaries' run paths.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublasLt.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/fused_linear.h"

namespace ddptrain {

bool fused_linear_has_cuda() { return true; }

namespace fused_linear_detail {

namespace {

// libcublasLt's `name`: in the process's global scope (an executable linked with libtorch_cuda),
// else in the library of this header's major release if already loaded (ddptrain itself loaded
// with RTLD_LOCAL, e.g. from a Python extension).
template <typename F>
F lt_symbol(const char* name) {
  void* f = dlsym(RTLD_DEFAULT, name);
  if (f == nullptr) {
    const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
    if (void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_NOLOAD)) f = dlsym(lib, name);
  }
  TORCH_CHECK(f != nullptr, "cuBLASLt: ", name, " is not in this process (libtorch_cuda loads libcublasLt)");
  return reinterpret_cast<F>(f);
}

// The cuBLASLt entry points used here, looked up once.
struct LtApi {
#define DDPTRAIN_LT_FN(name) decltype(&::name) name = lt_symbol<decltype(&::name)>(#name)
  DDPTRAIN_LT_FN(cublasLtGetStatusString);
  DDPTRAIN_LT_FN(cublasLtMatmulDescCreate);
  DDPTRAIN_LT_FN(cublasLtMatmulDescDestroy);
  DDPTRAIN_LT_FN(cublasLtMatmulDescSetAttribute);
  DDPTRAIN_LT_FN(cublasLtMatrixLayoutCreate);
  DDPTRAIN_LT_FN(cublasLtMatrixLayoutDestroy);
  DDPTRAIN_LT_FN(cublasLtMatmulPreferenceCreate);
  DDPTRAIN_LT_FN(cublasLtMatmulPreferenceDestroy);
  DDPTRAIN_LT_FN(cublasLtMatmulPreferenceSetAttribute);
  DDPTRAIN_LT_FN(cublasLtMatmulAlgoGetHeuristic);
  DDPTRAIN_LT_FN(cublasLtMatmul);
#undef DDPTRAIN_LT_FN
};

const LtApi& lt() {
  static const LtApi api;
  return api;
}

void lt_check(cublasStatus_t s, const char* what) {
  TORCH_CHECK(s == CUBLAS_STATUS_SUCCESS, "cuBLASLt: ", what, " failed: ", lt().cublasLtGetStatusString(s));
}

cudaDataType_t lt_type(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16:
      return CUDA_R_16BF;
    case at::kHalf:
      return CUDA_R_16F;
    case at::kFloat:
      return CUDA_R_32F;
    default:
      TORCH_CHECK(false, "cuBLASLt epilogues: bf16, fp16 or fp32 operands, got ", t);
  }
}

// cuBLASLt's epilogue for e, and its name (for what is said of it).
struct LtEpilogue {
  cublasLtEpilogue_t value;
  const char* name;
};

LtEpilogue lt_epilogue(Epilogue e) {
  switch (e) {
    case Epilogue::kNone:
      return {CUBLASLT_EPILOGUE_DEFAULT, "none"};
    case Epilogue::kBias:
      return {CUBLASLT_EPILOGUE_BIAS, "BIAS"};
    case Epilogue::kGeluAuxBias:
      return {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, "GELU_AUX_BIAS"};
    case Epilogue::kDGeluBGrad:
      return {CUBLASLT_EPILOGUE_DGELU_BGRAD, "DGELU_BGRAD"};
    case Epilogue::kBGradB:
      return {CUBLASLT_EPILOGUE_BGRADB, "BGRADB"};
  }
  return {CUBLASLT_EPILOGUE_DEFAULT, "?"};
}

// The largest power of two up to 256 that divides t's address: the heuristic assumes 256-byte
// aligned operands unless told (as ATen's own cuBLASLt calls tell it).
uint32_t alignment_bytes(const at::Tensor& t) {
  const auto p = reinterpret_cast<uintptr_t>(t.data_ptr());
  uint32_t a = 1;
  while (a < 256 && p % (2 * a) == 0) a *= 2;
  return a;
}

struct DescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { lt().cublasLtMatmulDescDestroy(d); }
};
struct LayoutDeleter {
  void operator()(cublasLtMatrixLayoutOpaque_t* l) const { lt().cublasLtMatrixLayoutDestroy(l); }
};
struct PreferenceDeleter {
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { lt().cublasLtMatmulPreferenceDestroy(p); }
};
using Desc = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PreferenceDeleter>;

Layout lt_layout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  lt_check(lt().cublasLtMatrixLayoutCreate(&l, t, rows, cols, ld), "cublasLtMatrixLayoutCreate");
  return Layout(l);
}

template <typename V>
void set_attribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const V& v) {
  lt_check(lt().cublasLtMatmulDescSetAttribute(d, a, &v, sizeof(v)), "cublasLtMatmulDescSetAttribute");
}

template <typename V>
void set_preference(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const V& v) {
  lt_check(lt().cublasLtMatmulPreferenceSetAttribute(p, a, &v, sizeof(v)),
           "cublasLtMatmulPreferenceSetAttribute");
}

// The workspace cuBLASLt may use: at least 32 MiB (torch's Lt workspace is 1 MiB unless
// CUBLASLT_WORKSPACE_SIZE says otherwise; TransformerEngine and llm.c give Hopper 32 MiB, and the
// bias-gradient epilogues reduce across tiles through it at 65,536 rows).
constexpr int64_t kWorkspaceBytes = int64_t{32} << 20;

// What lt_matmul takes: contiguous operands of D's dtype on D's device, leading dimensions that
// hold their matrices, an aux leading dimension of a multiple of 8 (cublasLt.h).
void check_gemm(const LtGemm& g) {
  for (const at::Tensor* t : {&g.a, &g.b, &g.d, &g.bias, &g.aux}) {
    if (!t->defined()) continue;
    TORCH_CHECK(t->is_contiguous() && t->device() == g.d.device() && t->scalar_type() == g.d.scalar_type(),
                "lt_matmul: operands contiguous, of D's dtype ", g.d.scalar_type(), " on ", g.d.device(),
                ", got ", t->scalar_type(), " on ", t->device());
  }
  TORCH_CHECK(g.lda >= (g.trans_a ? g.k : g.m) && g.ldb >= (g.trans_b ? g.n : g.k) && g.ldd >= g.m,
              "lt_matmul: leading dimensions ", g.lda, ", ", g.ldb, ", ", g.ldd,
              " below their matrices' rows");
  TORCH_CHECK(!g.aux.defined() || (g.aux_ld >= g.m && g.aux_ld % 8 == 0), "lt_matmul: aux_ld ", g.aux_ld,
              " must hold ", g.m, " rows and be a multiple of 8");
}

}  // namespace

bool lt_matmul(const LtGemm& g) {
  check_gemm(g);
  c10::cuda::CUDAGuard guard(g.d.device());
  const cudaDataType_t type = lt_type(g.d.scalar_type());
  cublasLtMatmulDesc_t raw_desc = nullptr;
  lt_check(lt().cublasLtMatmulDescCreate(&raw_desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
           "cublasLtMatmulDescCreate");
  const Desc desc(raw_desc);
  set_attribute(raw_desc, CUBLASLT_MATMUL_DESC_TRANSA,
                static_cast<int32_t>(g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N));
  set_attribute(raw_desc, CUBLASLT_MATMUL_DESC_TRANSB,
                static_cast<int32_t>(g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N));
  set_attribute(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                static_cast<uint32_t>(lt_epilogue(g.epilogue).value));
  if (g.bias.defined()) {
    set_attribute(raw_desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias.data_ptr());
    // A bias read is typed here; a bias gradient is written in D's type (cublasLt.h).
    if (g.epilogue == Epilogue::kBias || g.epilogue == Epilogue::kGeluAuxBias)
      set_attribute(raw_desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                    static_cast<int32_t>(lt_type(g.bias.scalar_type())));
  }
  if (g.aux.defined()) {
    set_attribute(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux.data_ptr());
    set_attribute(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.aux_ld);
  }
  const Layout a = g.trans_a ? lt_layout(type, g.k, g.m, g.lda) : lt_layout(type, g.m, g.k, g.lda);
  const Layout b = g.trans_b ? lt_layout(type, g.n, g.k, g.ldb) : lt_layout(type, g.k, g.n, g.ldb);
  const Layout d = lt_layout(type, g.m, g.n, g.ldd);

  const int64_t torch_bytes = static_cast<int64_t>(at::cuda::getCUDABlasLtWorkspaceSize());
  const uint64_t workspace_bytes = static_cast<uint64_t>(std::max(torch_bytes, kWorkspaceBytes));
  // Ordered on the current stream by the caching allocator, as ATen's own GEMM workspaces are;
  // from the allocator itself, not at::empty, which under deterministic algorithms fills what it
  // allocates (32 MiB a GEMM: Note [Deterministic GPU runs]).
  const c10::DataPtr workspace = c10::cuda::CUDACachingAllocator::get()->allocate(workspace_bytes);
  cublasLtMatmulPreference_t raw_pref = nullptr;
  lt_check(lt().cublasLtMatmulPreferenceCreate(&raw_pref), "cublasLtMatmulPreferenceCreate");
  const Preference pref(raw_pref);
  set_preference(raw_pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace_bytes);
  set_preference(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_bytes(g.a));
  set_preference(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_bytes(g.b));
  set_preference(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_bytes(g.d));
  set_preference(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_bytes(g.d));

  cublasLtHandle_t handle = at::cuda::getCurrentCUDABlasLtHandle();
  cublasLtMatmulHeuristicResult_t found = {};
  int count = 0;
  const cublasStatus_t s = lt().cublasLtMatmulAlgoGetHeuristic(handle, raw_desc, a.get(), b.get(), d.get(),
                                                               d.get(), raw_pref, 1, &found, &count);
  if (s == CUBLAS_STATUS_NOT_SUPPORTED || (s == CUBLAS_STATUS_SUCCESS && count == 0)) {
    // The caller runs ATen's ops; said, so a measurement of the epilogues knows.
    TORCH_WARN_ONCE("cuBLASLt has no algorithm for the ", lt_epilogue(g.epilogue).name,
                    " epilogue at m=", g.m, " n=", g.n, " k=", g.k, " (", g.d.scalar_type(),
                    "): that GEMM runs ATen's ops (Note [Linear epilogues in cuBLASLt])");
    return false;
  }
  lt_check(s, "cublasLtMatmulAlgoGetHeuristic");
  const float alpha = 1.0f, beta = 0.0f;
  lt_check(lt().cublasLtMatmul(handle, raw_desc, &alpha, g.a.data_ptr(), a.get(), g.b.data_ptr(), b.get(),
                               &beta, g.d.data_ptr(), d.get(), g.d.data_ptr(), d.get(), &found.algo,
                               workspace.get(), workspace_bytes, at::cuda::getCurrentCUDAStream()),
           "cublasLtMatmul");
  return true;
}

}  // namespace fused_linear_detail

}  // namespace ddptrain
