// WaitClock: how long training waits on communication, on the device where the wait happens.
//
// Note [Communication wait on a GPU]
// On CPU (Gloo) Work::wait() blocks the host until the all-reduce is done, so a host clock
// around it is the exposed wait. On NCCL it only makes the current CUDA stream wait for the
// communication stream and returns at once: a host clock measures ~0 however long the GPU
// then stalls. There the clock records CUDA events on the current stream around the waits;
// the time between them is what the compute stream spent waiting (plus the tiny scaling
// kernels queued there). They are read at take_seconds(), at a step line, long after they
// completed, so reading them costs no stall in the step.
#pragma once

#include <chrono>
#include <memory>

#include <c10/core/Device.h>

namespace ddptrain {

class WaitClock {
 public:
  explicit WaitClock(c10::Device device);
  ~WaitClock();
  WaitClock(const WaitClock&) = delete;
  WaitClock& operator=(const WaitClock&) = delete;

  /// Around the waits of one backward.
  void start();
  void stop();
  /// Seconds waited since the last call (CUDA: resolves the recorded event pairs).
  double take_seconds();

 private:
  struct DeviceEvents;  // CUDA builds only
  c10::Device device_;
  std::chrono::steady_clock::time_point t0_;
  double host_s_ = 0;
  std::unique_ptr<DeviceEvents> events_;
};

}  // namespace ddptrain
