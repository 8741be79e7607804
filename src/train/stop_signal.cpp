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
}

int stop_signal() { return g_stop_signal.load(); }

}  // namespace ddptrain
