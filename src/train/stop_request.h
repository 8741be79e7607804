// A stop request as the ranks agreed on it (Note [Agreed stop], train/stop_vote.h).
#pragma once

namespace ddptrain {

/// The signal a rank received and the lowest rank that received one; empty: no request.
struct StopRequest {
  int signal = 0;
  int rank = -1;
  explicit operator bool() const { return signal != 0; }
};

}  // namespace ddptrain
