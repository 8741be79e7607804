#include "test_device.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include "util/torch_compat.h"

namespace ddptrain::testing_device {
namespace {

const c10::Device kDevice(c10::DeviceType::PrivateUse1, 0);
compat::CpuMemoryAllocator g_allocator(kDevice);  // test-binary registration, as the kernels

// One device, one default stream, nothing to switch.
struct Guard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }
  c10::Device exchangeDevice(c10::Device) const override { return kDevice; }
  c10::Device getDevice() const override { return kDevice; }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override { return s; }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, Guard);

constexpr c10::DispatchKeySet kKeys(c10::DispatchKey::PrivateUse1);

at::Tensor empty(c10::IntArrayRef size, c10::optional<at::ScalarType> dtype, c10::optional<at::Layout>,
                 c10::optional<at::Device>, c10::optional<bool>, c10::optional<at::MemoryFormat> format) {
  return at::detail::empty_generic(size, &g_allocator, kKeys, c10::dtype_or_default(dtype), format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, c10::optional<at::ScalarType> dtype,
                         c10::optional<at::Layout>, c10::optional<at::Device>, c10::optional<bool>) {
  return at::detail::empty_strided_generic(size, stride, &g_allocator, kKeys, c10::dtype_or_default(dtype));
}

// The same memory seen as a CPU tensor (host memory either way).
at::Tensor host_view(const at::Tensor& t) {
  if (t.device().is_cpu()) return t;
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
}

// Every copy between this device and the CPU (in both directions) ends here.
at::Tensor copy_from(const at::Tensor& src, const at::Tensor& dst, bool /*non_blocking*/) {
  host_view(dst).copy_(host_view(src));
  return dst;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty);
  m.impl("empty_strided", empty_strided);
  m.impl("_copy_from", copy_from);
}

}  // namespace

at::Device test_device() { return kDevice; }

}  // namespace ddptrain::testing_device
