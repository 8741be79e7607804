// Precompiled header for the LibTorch translation units (ddpcore, ddptrain, tests).
// Parsing <torch/torch.h> costs ~15 s per translation unit on 2 cores; compiled once here.
#pragma once
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>
