// The one place that absorbs LibTorch version differences (1.13 from Debian, 2.x from PyPI).
// Everything else uses these names and stays version-neutral.
//  - 1.13: ProcessGroupGloo/NCCL derive from c10d::ProcessGroup.
//  - 2.x:  they derive from c10d::Backend; ProcessGroup became a dispatcher over Backends.
// Both offer allreduce/broadcast/barrier with the same signatures, so we hold the backend.
#pragma once

#include <torch/version.h>

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
using WorkHandle = c10::intrusive_ptr<c10d::Work>;

}  // namespace ddptrain::compat
