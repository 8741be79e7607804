#include "launch/line_pump.h"

namespace ddptrain {

void LinePump::feed(const char* data, size_t n) {
  partial_.append(data, n);
  size_t start = 0;
  // A line a write (of at most PIPE_BUF bytes, one the kernel never splits): lines from the
  // launcher's stdout and stderr sinks do not interleave mid-line where both are one pipe.
  for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1)
    out_->write(prefix_ + partial_.substr(start, nl - start + 1));
  partial_.erase(0, start);
}

void LinePump::flush() {
  if (!partial_.empty()) out_->write(prefix_ + partial_ + "\n");
  partial_.clear();
}

}  // namespace ddptrain
