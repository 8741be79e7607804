#include "launch/output_sink.h"

#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <deque>
#include <mutex>

namespace ddptrain {

struct OutputSink::State {
  explicit State(int out) : fd(out) {}
  const int fd;
  std::mutex mu;
  std::condition_variable more, written;
  std::deque<std::string> queue;
  size_t bytes = 0;  // queued, the one being written included
  bool stopping = false;
};

namespace {

void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t w = ::write(fd, s.data() + done, s.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;  // output closed (EPIPE: SIGPIPE is ignored): the rest is dropped
    done += static_cast<size_t>(w);
  }
}

}  // namespace

void OutputSink::write_queue(const std::shared_ptr<State>& s) {
  std::unique_lock<std::mutex> lock(s->mu);
  for (;;) {
    s->more.wait(lock, [&] { return s->stopping || !s->queue.empty(); });
    if (s->queue.empty()) return;  // stopping, and all written
    const std::string next = std::move(s->queue.front());
    s->queue.pop_front();
    lock.unlock();
    write_all(s->fd, next);
    lock.lock();
    s->bytes -= next.size();
    s->written.notify_all();
  }
}

OutputSink::OutputSink(int fd) : state_(std::make_shared<State>(fd)) {
  writer_ = std::thread(write_queue, state_);
}

OutputSink::~OutputSink() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stopping = true;
  }
  state_->more.notify_all();
  if (drain(std::chrono::milliseconds(0)))
    writer_.join();
  else
    writer_.detach();  // blocked on a reader: it holds the state, and ends with the process
}

void OutputSink::write(std::string lines) {
  if (lines.empty()) return;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->bytes += lines.size();
    state_->queue.push_back(std::move(lines));
  }
  state_->more.notify_one();
}

size_t OutputSink::queued_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->bytes;
}

bool OutputSink::drain(std::chrono::milliseconds within) {
  std::unique_lock<std::mutex> lock(state_->mu);
  return state_->written.wait_for(lock, within, [&] { return state_->bytes == 0; });
}

void say(OutputSink& sink, const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string text(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(text.data(), text.size() + 1, format, again);
  va_end(again);
  sink.write(std::move(text));
}

}  // namespace ddptrain
