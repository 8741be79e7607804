#include "obs/kernel_trace.h"

#include <set>

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

namespace ddptrain {

namespace profiler = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

namespace {

std::set<ActivityType> activities(bool cuda) {
  std::set<ActivityType> a{ActivityType::CPU};
  if (cuda) a.insert(ActivityType::CUDA);
  return a;
}

}  // namespace

bool KernelTrace::start(bool cuda, std::string* why) {
  // Whether LibTorch has Kineto is not visible to its users' compiler (USE_KINETO is not exported):
  // a LibTorch without it refuses to start here.
  try {
    // The steps' kernels and no others: what was queued before is done before recording starts,
    // and (stop_and_save) what the recorded steps queued is done before it stops (the host runs
    // ahead of the GPU: without it the last step's tail was missing from the trace).
    if (cuda) torch::cuda::synchronize();
    const ProfilerConfig config(ProfilerState::KINETO, /*report_input_shapes=*/true);
    profiler::prepareProfiler(config, activities(cuda));
    profiler::enableProfiler(config, activities(cuda));
  } catch (const std::exception& e) {
    if (why) *why = e.what();
    return false;
  }
  active_ = true;
  cuda_ = cuda;
  return true;
}

KernelTrace::~KernelTrace() {
  if (!active_) return;
  try {
    profiler::disableProfiler();
  } catch (...) {  // a destructor does not throw; the trace was incomplete anyway
  }
}

bool KernelTrace::stop_and_save(const std::string& path, std::string* why) {
  if (!active_) return false;
  active_ = false;
  try {
    if (cuda_) torch::cuda::synchronize();
    const auto result = profiler::disableProfiler();
    if (!result) return false;
    result->save(path);
  } catch (const std::exception& e) {
    if (why) *why = e.what();
    return false;
  }
  return true;
}

}  // namespace ddptrain
