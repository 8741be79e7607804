#include "obs/progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace ddptrain {

ProgressBar::ProgressBar(bool is_main) {
  const char* term = std::getenv("TERM");
  active_ = is_main && ::isatty(STDOUT_FILENO) == 1 && !(term && std::strcmp(term, "dumb") == 0);
}

bool ProgressBar::due(int64_t step, int64_t total) const {
  return active_ && (step >= total || !drawn_ ||
                     std::chrono::steady_clock::now() - last_ >= std::chrono::milliseconds(100));
}

void ProgressBar::update(int epoch, int64_t step, int64_t total, double loss, double sps, double eta_s) {
  if (!due(step, total)) return;
  last_ = std::chrono::steady_clock::now();
  drawn_ = true;
  constexpr int kWidth = 30;
  const int filled = total > 0 ? static_cast<int>(kWidth * step / total) : 0;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '.');
  const long eta = eta_s > 0 ? static_cast<long>(eta_s + 0.5) : 0;
  std::printf("\r\033[Kepoch %d [%s] %lld/%lld  ETA %ld:%02ld | %.0f samples/s | loss %.4f", epoch,
              bar.c_str(), static_cast<long long>(step), static_cast<long long>(total), eta / 60, eta % 60,
              sps, loss);
  std::fflush(stdout);
}

void ProgressBar::finish() {
  if (!active_ || !drawn_) return;
  std::printf("\n");
  std::fflush(stdout);
  drawn_ = false;
}

}  // namespace ddptrain
