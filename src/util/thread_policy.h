// How many intra-op threads a rank runs, and whether OpenMP's threads should wait passively.
#pragma once

#include <dlfcn.h>

#include <algorithm>

namespace ddptrain {

/// The intra-op threads of a rank: --threads, or (0) the cores shared among the local ranks.
inline int threads_per_rank(int requested, int cores, int local_ranks) {
  return requested > 0 ? requested : std::max(1, cores / std::max(local_ranks, 1));
}

/// Note [OpenMP threads of ranks that share cores]
/// After each parallel region OpenMP's worker threads spin for a while before they sleep
/// (libgomp's default, which counts only this process's threads against the cores). When the
/// local ranks' intra-op threads outnumber the cores, one rank's spinning threads take the
/// cores the others compute on. Measured on 2 cores (AMD EPYC), fashion-mnist width 0.125,
/// 2 ranks x 2 threads: evaluation 9.6 s instead of 1.2 s, training 758 instead of 1,070
/// samples/s with OMP_WAIT_POLICY=PASSIVE. Passive waiting costs a process that has its cores
/// to itself about 30% (one process, 2 threads: 1,290-1,360 instead of 1,800-1,990 samples/s),
/// so it is for oversubscribed ranks only. OpenMP reads the policy once, before main: `ddptrain
/// launch` puts OMP_WAIT_POLICY=PASSIVE into such workers' environment unless the user set
/// one; under another launcher the trainer says what to set.
inline bool threads_outnumber_cores(int local_ranks, int threads, int cores) {
  return threads > 1 && cores > 0 && static_cast<long long>(local_ranks) * threads > cores;
}

/// Note [Loader threads open no OpenMP team]
/// LibTorch's CPU ops run their parallel regions in a team of the calling thread's size
/// (OpenMP's per-thread nthreads). A loader thread that runs a large op (a 3x224x224 image's
/// copy) would start a team of its own, whose threads then spin on the cores the trainer
/// computes on (37% of a loader's profile was libgomp spinning: inspect loader, image_folder
/// at 224). PyTorch's DataLoader workers run with torch.set_num_threads(1); the loader's
/// threads set their own nthreads to 1 (at::set_num_threads would also change process-wide
/// state), in the OpenMP runtime LibTorch loaded (pip's torch ships its own libgomp, so the
/// symbol is looked up, not linked). LibTorch sets a thread's size to the process's
/// intra-op threads at its first op in that thread (at::set_num_threads' value): the loader
/// calls at::get_num_threads() first, which does that. False where there is no OpenMP runtime.
inline bool limit_this_thread_to_one_openmp_thread() {
  using SetThreads = void (*)(int);
  static const auto set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (set != nullptr) set(1);
  return set != nullptr;
}

}  // namespace ddptrain
