// A stop request as the ranks agreed on it (Note [Agreed stop], train/stop_vote.h).
#pragma once

namespace ddptrain {

/// The signal a rank received and the lowest rank that received one; empty: no request.
struct StopRequest {
  int signal = 0;
  int rank = -1;
  explicit operator bool() const { return signal != 0; }
};

/// The lowest rank's request among every rank's signal (0 where none).
inline StopRequest first_request(const int* signals, int world) {
  for (int r = 0; r < world; ++r)
    if (signals[r] != 0) return {signals[r], r};
  return {};
}

}  // namespace ddptrain
