// The CUDA tests' fixture (tests/cuda): each test needs a GPU and fails (never skips) without one.
#pragma once

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/cuda.h>

namespace ddptrain::testing_cuda {

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(torch::cuda::is_available()) << "no CUDA device: these tests need a GPU";
  }
};

inline const at::Device kGpu(at::kCUDA, 0);

}  // namespace ddptrain::testing_cuda
