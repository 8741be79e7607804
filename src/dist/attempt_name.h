// Note [An agent store outlives its attempts]
// Under torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE) every attempt of a job meets on one
// TCPStore server, which still holds the earlier attempts' keys (a process group's addresses, the
// rendezvous barrier's count), so each attempt needs keys of its own. The restart count cannot
// name the attempt: the nodes' agents count their restarts apart, and an agent restarts its
// workers for another node's failure without counting one ("membership changes do not count as
// retries", torch's elastic agent), so TORCHELASTIC_RESTART_COUNT differs between the nodes of one
// attempt. (Measured over network namespaces: a worker killed on node 1 while node 0's workers
// waited in a collective; node 0 restarted at count 0, node 1 at 1, and the ranks, keyed by their
// counts, never met again until --max_restarts ran out; ranks that did share a count read an
// earlier attempt's Gloo addresses.) The ranks agree on a name instead: rank 0 draws one; every
// other rank draws a fresh token, sets it as its hello and waits for a welcome keyed by that token
// (a key no earlier attempt set), whose value is rank 0's name, then answers it (its hello becomes
// "in:" + token); rank 0 welcomes each new hello it reads until every rank has answered the
// welcome of its latest one (an earlier attempt's hello, read before its rank's new one, gets a
// welcome nobody reads, taken back when the new one comes). Under torch's c10d rendezvous every
// agent stops its workers before it joins the next round; under static rendezvous an agent
// restarts its own alone, and another node's workers of the earlier attempt end at their next
// collective (one still waiting for its welcome may be welcomed into the new attempt: it has its
// rank in the same job, and the last hello of a rank is the one answered).
#pragma once

#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "util/clock.h"

namespace ddptrain {

/// The name this attempt's `world_size` ranks agree on over `store` (one that earlier attempts
/// used), at most until `deadline`: rank 0's fresh draw. Every rank calls it once per attempt.
/// RendezvousIncomplete where the ranks did not all come by the deadline.
std::string agree_on_attempt_name(c10d::Store& store, int rank, int world_size, Clock::time_point deadline);

}  // namespace ddptrain
