// LinePump: splits a byte stream into whole lines and writes each with a prefix, so the
// output of several workers interleaves line by line, never mid-line.
#pragma once

#include <string>

namespace ddptrain {

class LinePump {
 public:
  LinePump(std::string prefix, int out_fd) : prefix_(std::move(prefix)), out_fd_(out_fd) {}
  /// Appends bytes; writes every completed line.
  void feed(const char* data, size_t n);
  /// Writes a trailing partial line (at end of stream).
  void flush();

 private:
  void emit(const std::string& line);
  std::string prefix_;
  int out_fd_;
  std::string partial_;
};

}  // namespace ddptrain
