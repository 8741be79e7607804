#include "data/loader.h"

#include <cstring>

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/error.h"
#include "util/strings.h"
#include "util/thread_policy.h"

namespace ddptrain {

int64_t Loader::num_batches(int64_t n) const {
  return opts_.drop_last ? n / opts_.batch_size : (n + opts_.batch_size - 1) / opts_.batch_size;
}

namespace {

// A sample into its row of the batch: one memcpy for the usual contiguous CPU sample (no ATen
// op, no parallel region), else a copy. A sample of another shape than the batch's first is an
// error naming both, as PyTorch's default collate (torch.stack) refuses it: copy_ would
// broadcast it (a greyscale (1, H, W) image copied into each of the RGB batch's 3 channels).
void put_sample(at::Tensor row, const at::Tensor& sample, int64_t index, const char* what) {
  if (sample.sizes() != row.sizes())
    throw UsageError(ddptrain::str("sample ", index, "'s ", what, " has shape ", sample.sizes(),
                                   ", the batch's first ", row.sizes(),
                                   ": every sample of a dataset needs one shape (a Dataset of the ",
                                   "program's returns them so; a batch is its samples stacked)"));
  if (sample.is_contiguous() && sample.device().is_cpu() && sample.scalar_type() == row.scalar_type())
    std::memcpy(row.data_ptr(), sample.data_ptr(), sample.nbytes());
  else
    row.copy_(sample);
}

}  // namespace

// Note [Batch buffers recycled]
// A batch of 64 images at 224 is 38 MB, above glibc's largest mmap threshold (32 MiB), so each
// new batch was a fresh mapping whose every page faulted on its first write, and each freed
// batch an munmap: 15% of a loader thread's profile on the image folder. The loader keeps the
// inputs buffers of 1 MiB or more it made (pinned ones are cached by CUDA's host allocator
// instead) and builds a batch into one that nothing else references any more: no tensor and
// no view (the buffer's and its storage's counts are the pool's own), else makes a new one.
// Every row of a batch is written, so a reused buffer holds nothing of its last batch. At most
// num_workers x prefetch_factor + 2 are kept, for the loader's life.
at::Tensor Loader::inputs_buffer(const std::vector<int64_t>& shape, const at::TensorOptions& options) const {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  if (opts_.pin_memory || numel * static_cast<int64_t>(options.dtype().itemsize()) < (int64_t{1} << 20))
    return at::empty(shape, options);
  std::lock_guard<std::mutex> lock(pool_mu_);
  for (const at::Tensor& t : pool_)
    if (t.use_count() == 1 && t.storage().use_count() == 1 && t.sizes() == at::IntArrayRef(shape) &&
        t.dtype() == options.dtype())
      return t;
  at::Tensor t = at::empty(shape, options);
  if (pool_.size() < static_cast<size_t>(opts_.num_workers) * opts_.prefetch_factor + 2) pool_.push_back(t);
  return t;
}

Batch Loader::build(int64_t b) const {
  const int64_t begin = b * opts_.batch_size;
  const int64_t end = std::min<int64_t>(begin + opts_.batch_size, static_cast<int64_t>(indices_.size()));
  Example first = dataset_.get(indices_[begin]);
  auto shape_of = [&](const at::Tensor& t) {
    std::vector<int64_t> shape{end - begin};
    for (auto s : t.sizes()) shape.push_back(s);
    return shape;
  };
  const auto options = [&](const at::Tensor& t) { return t.options().pinned_memory(opts_.pin_memory); };
  Batch out{inputs_buffer(shape_of(first.input), options(first.input)),
            at::empty(shape_of(first.target), options(first.target)),
            std::vector<int64_t>(indices_.begin() + begin, indices_.begin() + end)};
  for (int64_t k = begin; k < end; ++k) {
    Example e = k == begin ? std::move(first) : dataset_.get(indices_[k]);
    put_sample(out.inputs[k - begin], e.input, indices_[k], "input");
    put_sample(out.targets[k - begin], e.target, indices_[k], "target");
  }
  return out;
}

// Note [A batch that fails comes in its turn]
// Workers build up to num_workers x prefetch_factor batches ahead of the trainer. A batch whose
// build throws (a file that cannot be read, an image that does not decode under --bad_images
// error) is the trainer's error when it asks for that batch, after every batch before it: were
// it rethrown at once, the run would end up to that many batches early, without the steps
// and the checkpoint (save_every_steps) that the batches before it make, and, where two
// batches of the window fail, naming whichever failed first in time, with its exit class. So
// a worker keeps the lowest failed batch and its exception, the workers go on building the
// batches before it and stop past it, and next() rethrows at that batch as num_workers 0 does.
void Loader::worker_loop(int64_t first, int worker) {
  // Loader threads yield the CPU to the training threads: on a machine with no spare core
  // they then run mostly while the trainer waits for communication, instead of preempting
  // compute (Linux nice values are per thread).
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), opts_.worker_nice);
  // Note [Loader threads open no OpenMP team]. LibTorch sets a thread's OpenMP size to the
  // process's intra-op threads at its first op there: done first, so that it does not undo ours.
  at::get_num_threads();
  limit_this_thread_to_one_openmp_thread();
  const int64_t stride = opts_.num_workers;
  const int64_t window = static_cast<int64_t>(opts_.num_workers) * opts_.prefetch_factor;
  for (int64_t b = first + worker; b < total_; b += stride) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || b > error_batch_ || b < next_ + window; });
      if (stopping_ || b > error_batch_) return;  // Note [A batch that fails comes in its turn]
    }
    try {
      Batch batch = build(b);
      std::lock_guard<std::mutex> lock(mu_);
      ready_.emplace(b, std::move(batch));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (b < error_batch_) {
        error_batch_ = b;
        error_ = std::current_exception();
      }
    }
    cv_.notify_all();
  }
}

void Loader::start(std::vector<int64_t> indices, int64_t skip_batches, bool keep_last_partial) {
  stop();
  indices_ = std::move(indices);
  const auto n = static_cast<int64_t>(indices_.size());
  total_ = keep_last_partial ? (n + opts_.batch_size - 1) / opts_.batch_size : num_batches(n);
  next_ = std::min(skip_batches, total_);
  ready_.clear();
  error_batch_ = kNoError;
  error_ = nullptr;
  stopping_ = false;
  // The first batch is fixed here, not read by the thread: a late-starting worker must not
  // see next_ already advanced by the others and skip its batch (a deadlock).
  const int64_t first = next_;
  for (int w = 0; w < opts_.num_workers; ++w)
    workers_.emplace_back([this, first, w] { worker_loop(first, w); });
}

std::optional<Batch> Loader::next() {
  if (next_ >= total_) {
    stop();
    return std::nullopt;
  }
  if (opts_.num_workers == 0) {  // a batch that throws is built (and throws) again at the next call
    Batch b = build(next_);
    ++next_;
    return b;
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return ready_.count(next_) > 0 || next_ == error_batch_; });
  if (next_ == error_batch_) {  // every batch before it was delivered
    auto err = error_;
    lock.unlock();
    stop();
    std::rethrow_exception(err);
  }
  auto node = ready_.extract(next_);
  ++next_;
  lock.unlock();
  cv_.notify_all();
  return std::move(node.mapped());
}

void Loader::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

}  // namespace ddptrain
