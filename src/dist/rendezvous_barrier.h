// Note [Rendezvous deadline]
// How long the ranks wait for each other to join (--rendezvous_timeout_s) is not how long a
// collective may take (--dist_timeout_s): nodes of a cluster job start minutes apart, while a
// hang in training should end soon. PyTorch's init_process_group uses one timeout for both
// (and so does ddptrain where no rendezvous timeout is given). So the store's first requests
// (a client's connection, retried until rank 0 serves it) get the rendezvous deadline, then
// every rank counts itself in and waits, up to that deadline, until all have (this barrier);
// only then does the store take the collective timeout and the process group connect, its
// peers all there. A rank alone says how many of the job's ranks joined.
#pragma once

#include <chrono>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace ddptrain {

/// Counts this rank in on `store` and waits until all `world_size` ranks have, at most
/// `deadline`; an Error saying how many joined when they did not. Once per store (a fresh
/// store, or a prefix of its own, per attempt).
void wait_for_every_rank(c10d::Store& store, int world_size, std::chrono::milliseconds deadline);

}  // namespace ddptrain
