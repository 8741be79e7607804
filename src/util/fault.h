// Fault injection for the failure tests: the tests set environment variables, production
// runs never do. Read once into a value at start (no global state).
//   DDPTRAIN_FAULT_KILL_AT_STEP=N   the rank in DDPTRAIN_FAULT_RANK (default 0) SIGKILLs
//                                   itself right after optimizer step N;
//   DDPTRAIN_FAULT_THROW_AT_STEP=N  ... throws an error there instead;
//   DDPTRAIN_FAULT_ATTEMPT=A        only in launch attempt A (TORCHELASTIC_RESTART_COUNT,
//                                   default 0); -1: in every attempt.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cstdint>

#include "util/env.h"
#include "util/error.h"

namespace ddptrain {

struct FaultPlan {
  int64_t kill_at_step = -1;
  int64_t throw_at_step = -1;
  int rank = 0;

  static FaultPlan from_env() {
    FaultPlan f;
    const long long attempt = env::get_int("DDPTRAIN_FAULT_ATTEMPT", -1, 1 << 20).value_or(0);
    const long long current = env::get_int("TORCHELASTIC_RESTART_COUNT", 0, 1 << 30).value_or(0);
    if (attempt != -1 && attempt != current) return f;
    f.kill_at_step = env::get_int("DDPTRAIN_FAULT_KILL_AT_STEP", 0, INT64_MAX).value_or(-1);
    f.throw_at_step = env::get_int("DDPTRAIN_FAULT_THROW_AT_STEP", 0, INT64_MAX).value_or(-1);
    f.rank = static_cast<int>(env::get_int("DDPTRAIN_FAULT_RANK", 0, 1 << 20).value_or(0));
    return f;
  }
  /// Called after each optimizer step.
  void after_step(int rank, int64_t global_step) const {
    if (rank != this->rank) return;
    if (global_step == kill_at_step) ::kill(::getpid(), SIGKILL);
    if (global_step == throw_at_step)
      throw Error(detail::concat("injected fault (DDPTRAIN_FAULT_THROW_AT_STEP) after step ", global_step));
  }
};

}  // namespace ddptrain
