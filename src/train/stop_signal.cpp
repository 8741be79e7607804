#include "train/stop_signal.h"

#include <signal.h>

#include <atomic>

namespace ddptrain {
namespace {

std::atomic<int> g_stop_signal{0};

void on_stop_signal(int sig) {
  int expected = 0;
  g_stop_signal.compare_exchange_strong(expected, sig);
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  // `ddptrain train ... | tee log` and a Ctrl-C: tee ends first, and the next log line (the stop
  // being said) would end the process by SIGPIPE before its save. Ignored, the write fails.
  ::signal(SIGPIPE, SIG_IGN);
}

int stop_signal() { return g_stop_signal.load(); }

}  // namespace ddptrain
