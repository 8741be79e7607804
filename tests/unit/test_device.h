// A test device for CPU-only machines: PrivateUse1 backed by host memory, with just enough
// kernels (empty, empty_strided, copies to and from the CPU) for tensors to be staged there
// and back. It computes nothing: a tensor that gets there can only be copied. Used by Note
// [Strict collective device]'s tests as "a device the training loop's tensors are not on".
#pragma once

#include <ATen/ATen.h>

namespace ddptrain::testing_device {

/// privateuseone:0; its kernels are registered when the test binary loads.
at::Device test_device();

}  // namespace ddptrain::testing_device
