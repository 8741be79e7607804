#include "train/fingerprint.h"

#include <cstdio>

#include <optional>
#include <vector>

#include "ddp/optimizer_state.h"
#include "ddp/zero_optimizer.h"
#include "serialize/python_pickle.h"
#include "util/fnv.h"
#include "util/torch_compat.h"

namespace ddptrain {
namespace {

// Folds a tensor's bytes into an FNV-1a hash.
uint64_t fold_tensor(uint64_t h, const at::Tensor& t) {
  auto c = t.detach().cpu().contiguous();
  return fnv1a(c.data_ptr(), c.nbytes(), h);
}

}  // namespace

uint64_t state_fingerprint(const torch::nn::Module& m) {
  uint64_t h = kFnvOffset;
  for (const auto& [name, t] : state_dict(m)) h = fold_tensor(h, t);
  return h;
}

namespace {

// One parameter's state tensors (the defined ones, in the entry's order).
uint64_t param_hash(const std::vector<at::Tensor>& state) {
  uint64_t h = kFnvOffset;
  for (const auto& t : state)
    if (t.defined()) h = fold_tensor(h, t);
  return h;
}

// The per-parameter hashes in parameter order; a marker where a parameter has no state.
uint64_t fold(const std::vector<std::optional<uint64_t>>& per_param) {
  uint64_t h = kFnvOffset;
  for (const auto& p : per_param) {
    if (!p) {
      h = (h ^ 0xffu) * kFnvPrime;
      continue;
    }
    for (int i = 0; i < 8; ++i) h = (h ^ ((*p >> (8 * i)) & 0xffu)) * kFnvPrime;
  }
  return h;
}

}  // namespace

uint64_t optimizer_fingerprint(torch::optim::Optimizer& opt) {
  std::vector<std::optional<uint64_t>> per_param;
  for (auto& group : opt.param_groups())
    for (auto& p : group.params()) {
      auto it = opt.state().find(compat::optimizer_state_key(p));
      per_param.push_back(it == opt.state().end()
                              ? std::nullopt
                              : std::optional<uint64_t>(param_hash(state_tensors(*it->second))));
    }
  return fold(per_param);
}

uint64_t optimizer_fingerprint(ShardedOptimizer& sharded, const torch::optim::Optimizer& full) {
  size_t n = 0;
  for (const auto& group : full.param_groups()) n += group.params().size();
  std::vector<std::optional<uint64_t>> per_param(n);
  sharded.visit_full_state(
      [&](size_t key, const std::vector<at::Tensor>& state) { per_param[key] = param_hash(state); });
  return fold(per_param);
}

std::string hex_fingerprint(uint64_t v) { return hex16(v); }

}  // namespace ddptrain
