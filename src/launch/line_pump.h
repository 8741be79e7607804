// LinePump: splits a byte stream into whole lines and queues each with a prefix on an output
// sink, so the output of several workers interleaves line by line, never mid-line.
#pragma once

#include <string>

#include "launch/output_sink.h"

namespace ddptrain {

class LinePump {
 public:
  LinePump(std::string prefix, OutputSink& out) : prefix_(std::move(prefix)), out_(&out) {}
  /// Appends bytes; queues every completed line.
  void feed(const char* data, size_t n);
  /// Queues a trailing partial line (at end of stream).
  void flush();
  /// Whether the sink holds more than it should of anyone's lines: the launcher then reads
  /// no more of this stream until it drains (Note [The launcher's output never holds the launcher]).
  bool backed_up() const { return out_->queued_bytes() > OutputSink::kBackedUpBytes; }

 private:
  std::string prefix_;
  OutputSink* out_;
  std::string partial_;
};

}  // namespace ddptrain
