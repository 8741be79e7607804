#include "launch/line_pump.h"

#include <unistd.h>

#include <cerrno>

namespace ddptrain {

void LinePump::feed(const char* data, size_t n) {
  partial_.append(data, n);
  size_t start = 0;
  for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1)
    emit(partial_.substr(start, nl - start + 1));
  partial_.erase(0, start);
}

void LinePump::flush() {
  if (!partial_.empty()) emit(partial_ + "\n");
  partial_.clear();
}

void LinePump::emit(const std::string& line) {
  // One write() per line: lines from different workers never interleave mid-line.
  std::string out = prefix_ + line;
  size_t done = 0;
  while (done < out.size()) {
    ssize_t w = ::write(out_fd_, out.data() + done, out.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;  // output closed: drop the line rather than block the launcher
    done += static_cast<size_t>(w);
  }
}

}  // namespace ddptrain
