#include "models/recompute.h"

#include <ATen/autocast_mode.h>
#include <ATen/core/ivalue.h>
#include <torch/autograd.h>

#include "util/torch_compat.h"

namespace ddptrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What backward needs besides the saved input (kept in an IValue capsule in the context).
struct Replay : torch::CustomClassHolder {
  BlockFn fn;
  std::vector<at::Tensor> buffers;
  at::Tensor cpu_rng;
  at::Tensor device_rng;  // the generator state of the input's own device (cuda:k, not cuda:0)
  at::Device device = at::kCPU;
  bool autocast = false;
  at::ScalarType autocast_dtype = at::kFloat;
};

// The default generator of this very device: on cuda:k it is cuda:k's, which a lookup by
// device type alone would not give (it answers for the current device).
at::Generator device_generator(at::Device d) { return at::globalContext().defaultGenerator(d); }

at::Tensor get_rng(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}
void set_rng(at::Generator gen, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

struct RecomputeFunction : torch::autograd::Function<RecomputeFunction> {
  // inputs = {x, params...}; grad mode is off in here.
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs,
                               c10::intrusive_ptr<Replay> replay) {
    const at::Tensor& x = inputs[0];
    replay->device = x.device();
    replay->cpu_rng = get_rng(at::detail::getDefaultCPUGenerator());
    if (!replay->device.is_cpu()) replay->device_rng = get_rng(device_generator(replay->device));
    replay->autocast = compat::AutocastGuard::is_enabled(replay->device.type());
    replay->autocast_dtype = compat::AutocastGuard::get_dtype(replay->device.type());
    ctx->save_for_backward(inputs.vec());  // the input, and the parameters (leaves: kept as they are)
    ctx->saved_data["replay"] = c10::IValue::make_capsule(replay);
    // Autocast caches the cast of each fp32 parameter until the outermost autocast region ends,
    // grad mode or not: every recomputed block's bf16/fp16 weights would stay for the whole
    // forward (under ZeRO stage 3, the gathered weights a unit has released). Not cached here;
    // the cast is the same, recomputed in backward.
    const bool cache = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(false);
    at::Tensor out;
    try {
      out = replay->fn(x);
    } catch (...) {
      at::autocast::set_autocast_cache_enabled(cache);
      throw;
    }
    at::autocast::set_autocast_cache_enabled(cache);
    return {out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto replay = c10::static_intrusive_pointer_cast<Replay>(ctx->saved_data["replay"].toCapsule());
    const variable_list saved = ctx->get_saved_variables();
    at::Tensor x = saved[0].detach().requires_grad_(saved[0].requires_grad());
    const std::vector<at::Tensor> params(saved.begin() + 1, saved.end());

    // Replay the forward exactly: same RNG draws, same autocast, buffers untouched.
    const at::Tensor cpu_now = get_rng(at::detail::getDefaultCPUGenerator());
    at::Tensor device_now;
    if (!replay->device.is_cpu()) device_now = get_rng(device_generator(replay->device));
    set_rng(at::detail::getDefaultCPUGenerator(), replay->cpu_rng);
    if (!replay->device.is_cpu()) set_rng(device_generator(replay->device), replay->device_rng);
    std::vector<at::Tensor> kept;
    {
      at::NoGradGuard no_grad;
      for (const auto& b : replay->buffers) kept.push_back(b.clone());
    }
    at::Tensor out;
    {
      at::AutoGradMode grad(true);
      compat::AutocastGuard autocast(replay->device.type(), replay->autocast_dtype, replay->autocast);
      // A forward that ran without autocast replays without it, whatever region the backward
      // runs in (else its gradients were of a bf16 forward: torch.utils.checkpoint sets it too).
      struct Restore {
        at::DeviceType device;
        bool on;
        ~Restore() { compat::AutocastGuard::set_enabled(device, on); }
      } restore{replay->device.type(), compat::AutocastGuard::is_enabled(replay->device.type())};
      if (!replay->autocast) compat::AutocastGuard::set_enabled(replay->device.type(), false);
      out = replay->fn(x);
    }
    set_rng(at::detail::getDefaultCPUGenerator(), cpu_now);
    if (!replay->device.is_cpu()) set_rng(device_generator(replay->device), device_now);

    // Gradients for the inputs that need them, without touching any .grad.
    std::vector<at::Tensor> wrt;
    std::vector<size_t> slot;  // index in {x, params...}
    if (x.requires_grad()) {
      wrt.push_back(x);
      slot.push_back(0);
    }
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i].requires_grad()) {
        wrt.push_back(params[i]);
        slot.push_back(i + 1);
      }
    variable_list grads(1 + params.size() + 1);  // {x, params...} and the replay argument
    if (!wrt.empty()) {
      auto got =
          torch::autograd::grad({out}, wrt, {grad_out[0]}, /*retain_graph=*/false, /*create_graph=*/false,
                                /*allow_unused=*/true);
      for (size_t k = 0; k < got.size(); ++k) grads[slot[k]] = got[k];
    }
    // The buffers as the first forward left them (after the gradients: the recomputed graph
    // saved them at their recomputed version).
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < kept.size(); ++i) replay->buffers[i].copy_(kept[i]);
    return grads;
  }
};

}  // namespace

at::Tensor recompute(BlockFn fn, const at::Tensor& x, const std::vector<at::Tensor>& params,
                     const std::vector<at::Tensor>& buffers) {
  auto replay = c10::make_intrusive<Replay>();
  replay->fn = std::move(fn);
  replay->buffers = buffers;
  variable_list inputs{x};
  inputs.insert(inputs.end(), params.begin(), params.end());
  // As a TensorList, so that autograd sees each tensor as an input (a std::vector would
  // count as one opaque argument).
  return RecomputeFunction::apply(at::TensorList(inputs), replay)[0];
}

}  // namespace ddptrain
