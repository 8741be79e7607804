#include "obs/wait_clock.h"

#include <utility>
#include <vector>

#ifdef USE_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace ddptrain {

#ifdef USE_CUDA
// See Note [Communication wait on a GPU]: (start, stop) pairs recorded on the current stream.
struct WaitClock::DeviceEvents {
  std::vector<std::pair<at::cuda::CUDAEvent, at::cuda::CUDAEvent>> pairs;

  void start(c10::Device d) {
    pairs.emplace_back(at::cuda::CUDAEvent(cudaEventDefault), at::cuda::CUDAEvent(cudaEventDefault));
    pairs.back().first.record(c10::cuda::getCurrentCUDAStream(d.index()));
  }
  void stop(c10::Device d) { pairs.back().second.record(c10::cuda::getCurrentCUDAStream(d.index())); }
  double take_seconds() {
    double s = 0;
    for (auto& [a, b] : pairs) {
      b.synchronize();
      s += a.elapsed_time(b) / 1000.0;
    }
    pairs.clear();
    return s;
  }
};
#else
struct WaitClock::DeviceEvents {
  void start(c10::Device) {}
  void stop(c10::Device) {}
  double take_seconds() { return 0; }
};
#endif

WaitClock::WaitClock(c10::Device device) : device_(device) {
  if (device_.is_cuda()) events_ = std::make_unique<DeviceEvents>();
}

WaitClock::~WaitClock() = default;

void WaitClock::start() {
  if (events_) return events_->start(device_);
  t0_ = std::chrono::steady_clock::now();
}

void WaitClock::stop() {
  if (events_) return events_->stop(device_);
  host_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

double WaitClock::take_seconds() {
  if (events_) return events_->take_seconds();
  return std::exchange(host_s_, 0.0);
}

}  // namespace ddptrain
