// The one place that absorbs LibTorch version differences (1.13 from Debian, 2.x from PyPI).
// Everything else uses these names and stays version-neutral.
//  - 1.13: ProcessGroupGloo/NCCL derive from c10d::ProcessGroup.
//  - 2.x:  they derive from c10d::Backend; ProcessGroup became a dispatcher over Backends.
// Both offer allreduce/broadcast/barrier with the same signatures, so we hold the backend.
//  - Optimizer::state() is keyed by the parameter's TensorImpl: as a decimal string in 1.13,
//    as the pointer itself in 2.x (optimizer_state_key).
//  - Autocast: per-device functions in 1.13 (set_enabled / set_cpu_enabled, ..._gpu_dtype /
//    ..._cpu_dtype), one function taking the device type in 2.x (AutocastGuard).
//  - Causal attention: scaled_dot_product_attention (fused kernels) exists from 2.0 on; 1.13
//    gets the plain masked softmax (causal_attention). Its enable_gqa (key/value heads shared
//    by groups of query heads, as they are) exists from 2.5 on; before, k and v are repeated.
//  - c10::Allocator::allocate is const in 1.13 and not in 2.x, which also wants copy_data
//    (CpuMemoryAllocator, behind the tests' CPU-backed device).
//  - Autograd nodes are held by std::shared_ptr up to 2.14 and by c10::intrusive_ptr from
//    2.15 on (GradAccumulator: whatever grad_accumulator() returns).
//  - ATen's fused optimizer kernels (at::_fused_adamw_, at::_fused_sgd_) and _foreach_mul_ by a
//    tensor exist in 2.x (2.4 on); 1.13 has none of them (kHasFusedOptimizers; fused_adamw_ and
//    fused_sgd_ refuse there, foreach_mul_ loops).
//  - c10::Event::synchronize exists in 2.x; 1.13 polls query() (synchronize_event).
#pragma once

#include <cmath>
#include <cstring>
#include <limits>

#include <ATen/ATen.h>

#include <torch/version.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/Event.h>
#include <torch/csrc/autograd/variable.h>

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace ddptrain::compat {

#if TORCH_VERSION_MAJOR >= 2
using CommBackend = c10d::Backend;
#else
using CommBackend = c10d::ProcessGroup;
#endif
using CommHandle = c10::intrusive_ptr<CommBackend>;

/// The values of `keys` (all there) in one request where the store has one (c10d's multiGet came
/// in a 2.x; 2.4 and later have it for sure).
inline std::vector<std::vector<uint8_t>> store_multi_get(c10d::Store& store,
                                                         const std::vector<std::string>& keys) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  return store.multiGet(keys);
#else
  std::vector<std::vector<uint8_t>> values;
  for (const auto& key : keys) values.push_back(store.get(key));
  return values;
#endif
}

/// The normal shutdown of a backend (2.x; NCCL finalizes its communicators). 1.13 has none.
inline void shutdown_backend(CommBackend& backend) {
#if TORCH_VERSION_MAJOR >= 2
  backend.shutdown();
#else
  (void)backend;
#endif
}

/// Host memory that reports itself as on `device` (a test device backed by CPU memory).
class CpuMemoryAllocator final : public c10::Allocator {
 public:
  explicit CpuMemoryAllocator(c10::Device device) : device_(device) {}
#if TORCH_VERSION_MAJOR >= 2
  c10::DataPtr allocate(size_t n) override { return make(n); }
  void copy_data(void* dst, const void* src, size_t n) const override { std::memcpy(dst, src, n); }
#else
  c10::DataPtr allocate(size_t n) const override { return make(n); }
#endif
  c10::DeleterFnPtr raw_deleter() const override { return &release; }

 private:
  static void release(void* p) { c10::GetCPUAllocator()->raw_deallocate(p); }
  c10::DataPtr make(size_t n) const {
    void* p = c10::GetCPUAllocator()->raw_allocate(n == 0 ? 1 : n);
    return {p, p, &release, device_};
  }
  c10::Device device_;
};

/// The key of a parameter's entry in torch::optim::Optimizer::state().
inline auto optimizer_state_key(const at::Tensor& param) {
#if TORCH_VERSION_MAJOR >= 2
  return static_cast<void*>(param.unsafeGetTensorImpl());
#else
  return c10::guts::to_string(param.unsafeGetTensorImpl());
#endif
}
using WorkHandle = c10::intrusive_ptr<c10d::Work>;

/// An owning handle on a leaf's gradient accumulator (the autograd node its post hooks hang on).
using GradAccumulator = decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));

/// Autocast to dtype on device for the guard's lifetime (the previous state comes back);
/// enabled=false leaves everything as it is.
class AutocastGuard {
 public:
  AutocastGuard(at::DeviceType device, at::ScalarType dtype, bool enabled)
      : device_(device), active_(enabled) {
    if (!active_) return;
    prev_enabled_ = is_enabled(device_);
    prev_dtype_ = get_dtype(device_);
    set_enabled(device_, true);
    set_dtype(device_, dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastGuard() {
    if (!active_) return;
    // Cast weights are cached within the outermost autocast region only.
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    set_enabled(device_, prev_enabled_);
    set_dtype(device_, prev_dtype_);
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

  static bool is_enabled(at::DeviceType d) {
#if TORCH_VERSION_MAJOR >= 2
    return at::autocast::is_autocast_enabled(d);
#else
    return d == at::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
  }
  static at::ScalarType get_dtype(at::DeviceType d) {
#if TORCH_VERSION_MAJOR >= 2
    return at::autocast::get_autocast_dtype(d);
#else
    return d == at::kCUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
#endif
  }
  static void set_enabled(at::DeviceType d, bool on) {
#if TORCH_VERSION_MAJOR >= 2
    at::autocast::set_autocast_enabled(d, on);
#else
    if (d == at::kCUDA)
      at::autocast::set_enabled(on);
    else
      at::autocast::set_cpu_enabled(on);
#endif
  }

 private:
  static void set_dtype(at::DeviceType d, at::ScalarType t) {
#if TORCH_VERSION_MAJOR >= 2
    at::autocast::set_autocast_dtype(d, t);
#else
    if (d == at::kCUDA)
      at::autocast::set_autocast_gpu_dtype(t);
    else
      at::autocast::set_autocast_cpu_dtype(t);
#endif
  }
  at::DeviceType device_;
  bool active_;
  bool prev_enabled_ = false;
  at::ScalarType prev_dtype_ = at::kFloat;
};

/// Whether cuDNN's convolutions may take TF32 for fp32. From LibTorch 2.9 the setting is per
/// operation; its form without one fails where the convolutions' and the RNNs' differ.
inline bool allow_tf32_cudnn_convolutions() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9)
  return at::globalContext().allowTF32CuDNN(at::Float32Op::CONV);
#else
  return at::globalContext().allowTF32CuDNN();
#endif
}

/// softmax(q k^T / sqrt(d) + causal mask) v for q of shape (B, heads, T, d), with dropout p on
/// the attention weights (pass 0 outside training). k and v, (B, kv_heads, T, d), may have fewer
/// heads (grouped-query attention): each serves heads / kv_heads consecutive query heads. SDPA
/// takes them as they are from LibTorch 2.5 on (as transformers does without a mask): no
/// repeated copies of k and v, in the forward or saved for the backward, and the gradient of
/// each key/value head is summed over its group inside the kernel.
inline at::Tensor causal_attention(const at::Tensor& q, at::Tensor k, at::Tensor v, double p) {
  const int64_t group = q.size(-3) / k.size(-3);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, p, /*is_causal=*/true, /*scale=*/{},
                                          /*enable_gqa=*/group > 1);
#else
  if (group > 1) k = k.repeat_interleave(group, -3), v = v.repeat_interleave(group, -3);
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, p, /*is_causal=*/true);
#else
  const int64_t T = q.size(-2);
  auto att = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  auto future = at::ones({T, T}, q.options().dtype(at::kBool)).triu(1);
  att = at::softmax(att.masked_fill(future, -std::numeric_limits<double>::infinity()), -1);
  if (p > 0) att = at::dropout(att, p, /*train=*/true);
  return at::matmul(att, v);
#endif
#endif
}

#if TORCH_VERSION_MAJOR >= 2
inline constexpr bool kHasFusedOptimizers = true;
#else
inline constexpr bool kHasFusedOptimizers = false;
#endif

/// at::_fused_adamw_ (lr a double; no grad_scale/found_inf: ddptrain's GradScaler unscales
/// before the step). Throws on LibTorch 1.13, which has no fused kernels (kHasFusedOptimizers).
inline void fused_adamw_(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                         at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs, at::TensorList steps,
                         double lr, double beta1, double beta2, double weight_decay, double eps,
                         bool amsgrad) {
#if TORCH_VERSION_MAJOR >= 2
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr, beta1, beta2,
                    weight_decay, eps, amsgrad, /*maximize=*/false);
#else
  (void)params, (void)grads, (void)exp_avgs, (void)exp_avg_sqs, (void)max_exp_avg_sqs, (void)steps, (void)lr,
      (void)beta1, (void)beta2, (void)weight_decay, (void)eps, (void)amsgrad;
  TORCH_CHECK(false, "fused optimizers need LibTorch 2.4 or later; this is ", TORCH_VERSION);
#endif
}

/// at::_fused_sgd_ (momentum buffers empty when momentum is 0; is_first_step: the buffers are
/// new and take the gradient as it is, as torch::optim::SGD's first step).
inline void fused_sgd_(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers,
                       double weight_decay, double momentum, double lr, double dampening, bool nesterov,
                       bool is_first_step) {
#if TORCH_VERSION_MAJOR >= 2
  at::_fused_sgd_(params, grads, momentum_buffers, weight_decay, momentum, lr, dampening, nesterov,
                  /*maximize=*/false, is_first_step);
#else
  (void)params, (void)grads, (void)momentum_buffers, (void)weight_decay, (void)momentum, (void)lr,
      (void)dampening, (void)nesterov, (void)is_first_step;
  TORCH_CHECK(false, "fused optimizers need LibTorch 2.4 or later; this is ", TORCH_VERSION);
#endif
}

/// Waits for the work recorded before `event` (and nothing queued after it).
inline void synchronize_event(c10::Event& event) {
#if TORCH_VERSION_MAJOR >= 2
  event.synchronize();
#else
  while (!event.query()) std::this_thread::yield();
#endif
}

/// Multiplies every tensor by the 0-dim tensor `factor`, on its device (no host read).
inline void foreach_mul_(at::TensorList tensors, const at::Tensor& factor) {
#if TORCH_VERSION_MAJOR >= 2
  at::_foreach_mul_(tensors, factor);
#else
  for (const auto& t : tensors) const_cast<at::Tensor&>(t).mul_(factor);
#endif
}

}  // namespace ddptrain::compat
