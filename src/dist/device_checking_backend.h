// DeviceCheckingBackend: a process group that takes tensors on one device only, as NCCL takes
// only the rank's GPU, over a backend that works on CPU tensors (Gloo). See
// Note [Strict collective device].
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "util/torch_compat.h"

namespace ddptrain {

/// Note [Strict collective device]
/// CI has no GPU, and Gloo takes CPU tensors, so a collective whose tensors NCCL would refuse
/// ("Tensors must be CUDA and dense") passes every CPU test. DistOptionsResolved::strict_device
/// makes a DistContext behave as if its backend took tensors on that device only: the process
/// group is wrapped in a DeviceCheckingBackend, which refuses any tensor elsewhere (naming the
/// collective and both devices) and otherwise runs the wrapped backend on CPU copies that it
/// copies back; DistContext stages every collective to that device (Note [Collectives on the
/// backend's device]), the asynchronous ones (DDP's buckets, the stop vote) synchronously in
/// this mode. A CPU test picks a device the training loop's tensors do not live on (the tests'
/// PrivateUse1 device backed by CPU memory) and runs training, evaluation, checkpoints, SyncBN
/// and the stop vote through it: a collective that bypassed staging would fail by name.
class DeviceCheckingBackend final : public compat::CommBackend {
 public:
  DeviceCheckingBackend(compat::CommHandle inner, at::Device required, std::chrono::milliseconds timeout);

  const std::string getBackendName() const override;
  compat::WorkHandle allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  compat::WorkHandle broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  compat::WorkHandle allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                               const c10d::AllgatherOptions& opts) override;
  compat::WorkHandle reduce_scatter(std::vector<at::Tensor>& outputs,
                                    std::vector<std::vector<at::Tensor>>& inputs,
                                    const c10d::ReduceScatterOptions& opts) override;
  compat::WorkHandle barrier(const c10d::BarrierOptions& opts) override;

  /// How many tensors were checked and handed on so far.
  int64_t checked_tensors() const { return checked_.load(); }

 private:
  using Op = std::function<compat::WorkHandle(std::vector<at::Tensor>&)>;
  // Checks every tensor is on required_, runs op on CPU copies, waits, copies the results back.
  compat::WorkHandle on_cpu(std::vector<at::Tensor>& tensors, const char* what, const Op& op);
  // The same for a collective of one tensor and one list (allgather: the input and the outputs;
  // reduce_scatter: the output and the inputs).
  using SplitOp =
      std::function<compat::WorkHandle(std::vector<at::Tensor>&, std::vector<std::vector<at::Tensor>>&)>;
  compat::WorkHandle on_cpu(std::vector<at::Tensor>& one, std::vector<std::vector<at::Tensor>>& list,
                            const char* what, const SplitOp& op);

  compat::CommHandle inner_;
  at::Device required_;
  std::chrono::milliseconds timeout_;
  std::atomic<int64_t> checked_{0};
};

}  // namespace ddptrain
