#include "train/fingerprint.h"

#include <cstdio>

#include "checkpoint/python_pickle.h"
#include "train/optimizer.h"

namespace ddptrain {
namespace {

constexpr uint64_t kFnvOffset = 1469598103934665603ull, kFnvPrime = 1099511628211ull;

// Folds a tensor's bytes into an FNV-1a hash.
uint64_t fnv1a(uint64_t h, const at::Tensor& t) {
  auto c = t.detach().cpu().contiguous();
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

}  // namespace

uint64_t state_fingerprint(const torch::nn::Module& m) {
  uint64_t h = kFnvOffset;
  for (const auto& [name, t] : state_dict(m)) h = fnv1a(h, t);
  return h;
}

// A marker where a parameter has no state yet.
uint64_t optimizer_fingerprint(torch::optim::Optimizer& opt) {
  uint64_t h = kFnvOffset;
  for (const auto& t : optimizer_state_tensors(opt)) h = t.defined() ? fnv1a(h, t) : (h ^ 0xffu) * kFnvPrime;
  return h;
}

std::string hex_fingerprint(uint64_t v) {
  char fp[32];
  std::snprintf(fp, sizeof(fp), "%016llx", static_cast<unsigned long long>(v));
  return fp;
}

}  // namespace ddptrain
