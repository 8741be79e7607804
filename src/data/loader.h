// Loader: turns this rank's sampler indices into batches of batch_size (drop_last), in
// sampler order, prepared ahead of the trainer by num_workers threads.
// Note [Loader order]: worker k builds batches k, k+W, k+2W, ...; the trainer takes batch
// b only when it is complete, so the batch sequence is the same for any number of workers
// and results never depend on it. At most prefetch batches wait ahead of the trainer.
// Threads are joined when the epoch ends, on early exit and in the destructor.
// With pin_memory, batches are built in page-locked (pinned) memory, so the trainer's copy to
// the GPU can be asynchronous (non_blocking); the caching host allocator keeps a block until
// the copies that read it have finished. Large input buffers are recycled (Note [Batch buffers
// recycled], loader.cpp).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <ATen/ATen.h>

#include "data/datasets.h"
#include "data/loader_options.h"

namespace ddptrain {

struct Batch {
  at::Tensor inputs;             // (B, C, H, W) float32 images, or (B, T) int64 tokens
  at::Tensor targets;            // (B) int64 classes, or (B, T) int64 next tokens
  std::vector<int64_t> indices;  // the dataset index of each sample
};

class Loader {
 public:
  /// OptionError for options that would hang or divide by zero (LoaderOptions::validate).
  Loader(const Dataset& dataset, LoaderOptions opts) : dataset_(dataset), opts_(opts) { opts_.validate(); }
  ~Loader() { stop(); }
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  /// Starts an epoch over these indices, skipping the first skip_batches batches;
  /// keep_last_partial: a last batch smaller than batch_size is kept whatever drop_last says.
  void start(std::vector<int64_t> indices, int64_t skip_batches = 0, bool keep_last_partial = false);
  /// The next batch in order, or nullopt at the end of the epoch. Rethrows the exception of a
  /// batch that failed to build when that batch is next (Note [A batch that fails comes in its
  /// turn]), and again on each later call until start().
  std::optional<Batch> next();
  /// Batches in an epoch of n indices.
  int64_t num_batches(int64_t n) const;
  /// Stops and joins the workers (idempotent).
  void stop();

 private:
  Batch build(int64_t batch_index) const;
  at::Tensor inputs_buffer(const std::vector<int64_t>& shape, const at::TensorOptions& options) const;
  void worker_loop(int64_t first, int worker);

  const Dataset& dataset_;
  LoaderOptions opts_;
  std::vector<int64_t> indices_;
  int64_t total_ = 0;
  int64_t next_ = 0;  // the next batch the trainer takes

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, Batch> ready_;
  // The lowest batch whose build threw, and its exception (Note [A batch that fails comes in
  // its turn]); kNoError: none.
  static constexpr int64_t kNoError = INT64_MAX;
  int64_t error_batch_ = kNoError;
  std::exception_ptr error_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
  mutable std::mutex pool_mu_;
  mutable std::vector<at::Tensor> pool_;  // large inputs buffers, reused once nothing holds them
};

}  // namespace ddptrain
