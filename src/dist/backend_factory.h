// The one choke point that names Gloo and NCCL (see ../shared/STYLE.md, 11). Everything
// else speaks compat::CommBackend / c10d::Work.
//
// Note [c10d after the old backends]
// Upstream plans torchcomms as the default communication layer (2.12 notes: "2.13+") and to
// deprecate the existing c10d::Backends. What the torch we build on shows (2.15.0's headers):
//  - c10d::Backend is still the abstraction every engine implements: torchcomms' NCCL engine
//    arrives in-tree as c10d::nccl2::ProcessGroupNCCL (nccl2/ProcessGroupNCCL.hpp, 2.14+), a
//    c10d::Backend with the old constructor (store, rank, size, ProcessGroupNCCL::Options).
//  - the single-tensor collectives got torchcomms' names (all_gather_single,
//    reduce_scatter_single); the old names (_allgather_base, _reduce_scatter_base) are
//    forwarding aliases. ddptrain calls neither: it uses the list forms (allgather,
//    reduce_scatter), unchanged since 1.13.
//  - ProcessGroupGloo and c10d::ProcessGroupNCCL still build and run unchanged.
// So ddptrain holds a c10d::Backend (compat::CommBackend) made here and nowhere else. When the
// old backends go, only make_backend changes: NCCL becomes c10d::nccl2::ProcessGroupNCCL (the
// same options), Gloo whatever CPU engine replaces it; a backend API that is not a
// c10d::Backend would get an adapter class in dist/ (as DeviceCheckingBackend wraps one
// today), and DistContext, the reducer and ZeRO stay as they are. torch_compat.h carries the
// version switches (CommBackend, GradAccumulator).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include <ATen/ATen.h>

#include "util/torch_compat.h"

namespace ddptrain {

/// Resolves --backend (auto|gloo|nccl) against the device; UsageError for nccl without CUDA.
std::string resolve_backend(const std::string& requested, const at::Device& device);

/// Whether the backend can all-reduce tensors of this dtype (Gloo in LibTorch 1.13 has no
/// bfloat16 reduction; NCCL and later Gloo have).
bool backend_reduces(const std::string& backend, at::ScalarType dtype);
/// Whether the backend has reduce_scatter (Gloo in LibTorch 1.13 has none).
bool backend_reduce_scatters(const std::string& backend);

/// Note [Waiting on NCCL]
/// c10d's Work::wait(timeout) holds the host until the collective completes whenever a timeout
/// is given (WorkNCCL::wait: "blockingWait_ || timeout != kNoTimeout"); without one, NCCL's
/// wait only makes the current CUDA stream wait for the communication stream, and returns.
/// ddptrain's step is built on the latter (Note [Communication wait on a GPU], Note [No host
/// sync in a step]): given the timeout, the reducer's last bucket held the host until the GPU
/// had run the whole backward, each step (the host then queued the optimizer and the next
/// forward while the GPU idled), and at world > 1 the stop vote held it until the step's end.
/// So on NCCL DistContext waits without one. What bounds a collective that never completes
/// there is the process group's own timeout (--dist_timeout_s, given to it in make_backend):
/// NCCL's watchdog thread aborts the communicator and ends the process
/// (TORCH_NCCL_ASYNC_ERROR_HANDLING), and the launcher reports that rank. What it gives up: on
/// NCCL the flight recorder marks a collective completed when the stream waits for it, so a
/// hang is named by NCCL's watchdog and its own flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE),
/// not by ddptrain's verdict. Gloo's wait blocks the host anyway, with the context's timeout.
/// True when DistContext::wait holds the host (with its timeout) for this backend.
bool host_waits(const std::string& backend);

/// Note [Collectives on the backend's device]
/// NCCL takes only CUDA tensors on the rank's own device ("Tensors must be CUDA and dense");
/// Gloo takes CPU tensors (and CUDA ones, which it stages itself). So a collective's tensor
/// that lives elsewhere is staged by DistContext: copied to this device, reduced there, and
/// copied back. Pure: the device tensor_device must be staged to for `backend` on a rank
/// whose device is rank_device, or nullopt when the backend takes it as it is.
std::optional<at::Device> staging_device(const std::string& backend, const at::Device& rank_device,
                                         const at::Device& tensor_device);

/// Creates the process-group backend for this rank. For Gloo the network interface is
/// GLOO_SOCKET_IFNAME when set, loopback when master_addr is a loopback address, else the
/// address the hostname resolves to (PyTorch's rule). NCCL is bound to `device` (the rank's
/// GPU, as Python's init_process_group(device_id=...)): without it NCCL guesses the device of
/// a barrier from the global rank, wrong on nodes whose ranks do not map to GPUs that way.
compat::CommHandle make_backend(const std::string& backend, const c10::intrusive_ptr<c10d::Store>& store,
                                int rank, int world_size, const std::string& master_addr,
                                std::chrono::milliseconds timeout, const at::Device& device);

}  // namespace ddptrain
