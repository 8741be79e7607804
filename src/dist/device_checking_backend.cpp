#include "dist/device_checking_backend.h"

#include "obs/logger.h"
#include "util/error.h"

namespace ddptrain {

DeviceCheckingBackend::DeviceCheckingBackend(compat::CommHandle inner, at::Device required,
                                             std::chrono::milliseconds timeout)
    : compat::CommBackend(inner->getRank(), inner->getSize()),
      inner_(std::move(inner)),
      required_(required),
      timeout_(timeout) {}

const std::string DeviceCheckingBackend::getBackendName() const {
  return "device-checking(" + inner_->getBackendName() + ")";
}

compat::WorkHandle DeviceCheckingBackend::on_cpu(std::vector<at::Tensor>& tensors, const char* what,
                                                 const Op& op) {
  std::vector<at::Tensor> cpu;
  cpu.reserve(tensors.size());
  for (const auto& t : tensors) {
    if (t.device() != required_)
      throw CollectiveError(str(what, " got a tensor on ", t.device().str(),
                                ", but this backend takes tensors on ", required_.str(),
                                " only (Note [Strict collective device]): stage it through "
                                "DistContext, or create it on the context's device"));
    cpu.push_back(t.to(at::kCPU));
  }
  auto work = op(cpu);
  work->wait(timeout_);
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].copy_(cpu[i]);
  checked_ += static_cast<int64_t>(tensors.size());
  return work;
}

compat::WorkHandle DeviceCheckingBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                    const c10d::AllreduceOptions& opts) {
  return on_cpu(tensors, "all_reduce",
                [&](std::vector<at::Tensor>& t) { return inner_->allreduce(t, opts); });
}

compat::WorkHandle DeviceCheckingBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                    const c10d::BroadcastOptions& opts) {
  return on_cpu(tensors, "broadcast", [&](std::vector<at::Tensor>& t) { return inner_->broadcast(t, opts); });
}

compat::WorkHandle DeviceCheckingBackend::on_cpu(std::vector<at::Tensor>& one,
                                                 std::vector<std::vector<at::Tensor>>& list, const char* what,
                                                 const SplitOp& op) {
  DDP_ASSERT(one.size() == 1 && list.size() == 1, what, ": one tensor and one list");
  std::vector<at::Tensor> all{one[0]};
  all.insert(all.end(), list[0].begin(), list[0].end());
  return on_cpu(all, what, [&](std::vector<at::Tensor>& t) {
    std::vector<at::Tensor> cpu_one{t[0]};
    std::vector<std::vector<at::Tensor>> cpu_list{std::vector<at::Tensor>(t.begin() + 1, t.end())};
    return op(cpu_one, cpu_list);
  });
}

compat::WorkHandle DeviceCheckingBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                    std::vector<at::Tensor>& inputs,
                                                    const c10d::AllgatherOptions& opts) {
  return on_cpu(inputs, outputs, "allgather",
                [&](std::vector<at::Tensor>& in, std::vector<std::vector<at::Tensor>>& out) {
                  return inner_->allgather(out, in, opts);
                });
}

compat::WorkHandle DeviceCheckingBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                         std::vector<std::vector<at::Tensor>>& inputs,
                                                         const c10d::ReduceScatterOptions& opts) {
  return on_cpu(outputs, inputs, "reduce_scatter",
                [&](std::vector<at::Tensor>& out, std::vector<std::vector<at::Tensor>>& in) {
                  return inner_->reduce_scatter(out, in, opts);
                });
}

compat::WorkHandle DeviceCheckingBackend::barrier(const c10d::BarrierOptions& opts) {
  return inner_->barrier(opts);
}

}  // namespace ddptrain
