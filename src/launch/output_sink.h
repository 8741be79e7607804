// Note [The launcher's output never holds the launcher]
// The launcher forwards its workers' lines and says what it does on its own stdout and stderr.
// A reader that stops reading (a pager left open, `| sleep`, a full pipe) blocks a write to
// them, and when the launcher's one thread wrote them itself, that stopped everything it does:
// reaping, forwarding a signal, the SIGKILL after the grace, the stall watch and its own exit
// (a failed worker went unnoticed, its group ran on). Now each output has a writer thread of
// its own fed by a queue of whole lines: the launcher's thread never waits on a reader. Where
// a worker's lines queue up beyond kBackedUpBytes, the launcher stops reading that worker's
// pipe until they drain, so the worker's own writes block, as under torchrun, whose workers
// write to its stdio; nothing is dropped, and the launcher's loop runs on. At its end the
// launcher waits for the queues to drain for a few seconds, then returns its exit code
// whatever is left unwritten (and a writer still blocked then ends with the process).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>

namespace ddptrain {

class OutputSink {
 public:
  /// Lines queued beyond this hold the worker whose lines they are (Note [The launcher's output
  /// never holds the launcher]).
  static constexpr size_t kBackedUpBytes = size_t{4} << 20;

  /// Writes what it is given to `fd`, in order, from a thread of its own.
  explicit OutputSink(int fd);
  /// Waits for nothing: a writer still blocked is left to end with the process.
  ~OutputSink();
  OutputSink(const OutputSink&) = delete;
  OutputSink& operator=(const OutputSink&) = delete;

  /// Queues whole lines (one write each, never interleaved with another's); never blocks.
  void write(std::string lines);
  /// Bytes queued and not yet written.
  size_t queued_bytes() const;
  /// Waits until everything queued is written, at most `within`; whether it was.
  bool drain(std::chrono::milliseconds within);

 private:
  struct State;
  static void write_queue(const std::shared_ptr<State>& s);  // the writer thread
  std::shared_ptr<State> state_;  // shared with the writer thread, which may outlive this
  std::thread writer_;
};

/// printf into `sink` (the launcher's own messages, in order with the workers' lines).
void say(OutputSink& sink, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace ddptrain
