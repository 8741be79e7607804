// Fault injection for the failure tests: the tests set environment variables, production
// runs never do. Read once into a value at start (no global state).
//   DDPTRAIN_FAULT_KILL_AT_STEP=N  the rank in DDPTRAIN_FAULT_RANK (default 0) SIGKILLs
//                                  itself right after optimizer step N.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cstdint>

#include "util/env.h"

namespace ddptrain {

struct FaultPlan {
  int64_t kill_at_step = -1;
  int rank = 0;

  static FaultPlan from_env() {
    FaultPlan f;
    f.kill_at_step = env::get_int("DDPTRAIN_FAULT_KILL_AT_STEP", 0, INT64_MAX).value_or(-1);
    f.rank = static_cast<int>(env::get_int("DDPTRAIN_FAULT_RANK", 0, 1 << 20).value_or(0));
    return f;
  }
  /// Called after each optimizer step.
  void after_step(int rank, int64_t global_step) const {
    if (global_step == kill_at_step && rank == this->rank) ::kill(::getpid(), SIGKILL);
  }
};

}  // namespace ddptrain
