#include "dist/backend_factory.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "dist/env_contract.h"
#include "util/env.h"
#include "util/error.h"

namespace ddptrain {

std::string resolve_backend(const std::string& requested, const at::Device& device) {
  if (requested == "auto") return device.is_cuda() ? "nccl" : "gloo";
  if (requested == "nccl") {
    DDP_USAGE_CHECK(device.is_cuda(),
                    "backend nccl (DistOptionsResolved::backend; ddptrain train --backend) ",
                    "needs CUDA, but no CUDA device is available to this process; use gloo (or auto) on CPU");
#ifndef USE_C10D_NCCL
    throw UsageError(
        "backend nccl (DistOptionsResolved::backend; ddptrain train --backend): this build of LibTorch "
        "has no NCCL; use gloo, or build against a CUDA LibTorch (pip torch) for NCCL");
#endif
  }
  return requested;
}

bool backend_reduces(const std::string& backend, at::ScalarType dtype) {
#if TORCH_VERSION_MAJOR < 2
  if (backend == "gloo" && dtype == at::kBFloat16) return false;
#endif
  return true;
}

bool host_waits(const std::string& backend) { return backend != "nccl"; }

bool backend_reduce_scatters(const std::string& backend) {
#if TORCH_VERSION_MAJOR < 2
  if (backend == "gloo") return false;
#endif
  return !backend.empty();
}

namespace {

std::shared_ptr<::gloo::transport::Device> gloo_device(const std::string& master_addr) {
  if (auto ifname = env::get("GLOO_SOCKET_IFNAME")) {
    // PyTorch accepts a comma-separated list; we use the first interface.
    std::string first = ifname->substr(0, ifname->find(','));
    return c10d::ProcessGroupGloo::createDeviceForInterface(first);
  }
  if (is_loopback_address(master_addr)) return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

}  // namespace

std::optional<at::Device> staging_device(const std::string& backend, const at::Device& rank_device,
                                         const at::Device& tensor_device) {
  if (backend == "nccl") {
    if (tensor_device == rank_device) return std::nullopt;
    return rank_device;
  }
  if (tensor_device.is_cpu() || tensor_device.is_cuda()) return std::nullopt;
  return at::Device(at::kCPU);
}

compat::CommHandle make_backend(const std::string& backend, const c10::intrusive_ptr<c10d::Store>& store,
                                int rank, int world_size, const std::string& master_addr,
                                std::chrono::milliseconds timeout, const at::Device& device) {
  if (backend == "gloo") {
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    opts->devices.push_back(gloo_device(master_addr));
    opts->threads = 2;
    return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, opts);
  }
#ifdef USE_C10D_NCCL
  if (backend == "nccl") {
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = timeout;
    auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, opts);
    pg->setBoundDeviceId(device);
    return pg;
  }
#endif
  DDP_ASSERT(false, "unsupported backend ", backend);
  return {};
}

}  // namespace ddptrain
