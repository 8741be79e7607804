#include "train/stop_signal.h"

#include <signal.h>
#include <time.h>

#include <atomic>

namespace ddptrain {
namespace {

std::atomic<int> g_stop_signal{0};
std::atomic<long long> g_first_ns{0};  // CLOCK_MONOTONIC at the first signal

long long now_ns() {
  struct timespec t {};
  ::clock_gettime(CLOCK_MONOTONIC, &t);  // async-signal-safe
  return static_cast<long long>(t.tv_sec) * 1000000000LL + t.tv_nsec;
}

// Note [A second stop signal]: the first stop signal (SIGTERM, SIGINT, and SIGHUP, SIGQUIT,
// SIGUSR1 and SIGUSR2 where not ignored) asks for a stop at the next step the
// ranks agree on; a rank held in a collective (a peer hung) reaches none until the timeout
// (--dist_timeout_s, 600 s by default), and a bare `ddptrain train` could then be ended by
// SIGKILL only. A second signal 2 s or more after the first ends the process by that signal
// (as a launcher escalates after its grace). Closer ones are one request: a terminal's Ctrl-C
// reaches a launcher's workers in its process group (torchrun's) as SIGINT, and the
// launcher's forwarded SIGTERM follows at once.
void on_stop_signal(int sig) {
  const long long now = now_ns();
  long long unset = 0;
  g_first_ns.compare_exchange_strong(unset, now);  // before the signal: a second one reads a time
  int expected = 0;
  if (g_stop_signal.compare_exchange_strong(expected, sig)) return;
  if (now - g_first_ns.load() < 2000000000LL) return;
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);  // one handler at a time: another signal waits for this one's end
  for (const int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) sigaddset(&sa.sa_mask, sig);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  // Each stops and saves as SIGTERM does, as under `ddptrain launch`, where it has its default
  // action: ignored (nohup), the run goes on; a program's own handler stays. A hang-up (the ssh
  // session of a bare `ddptrain train` gone); a quit (torchrun forwards SIGQUIT as it came; its
  // default dumped core); SIGUSR1/SIGUSR2, a scheduler's warning before its time limit (Slurm's
  // --signal, torchrun --signals_to_handle), whose default ended the run unsaved.
  for (const int sig : {SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL)
      ::sigaction(sig, &sa, nullptr);
  }
  // `ddptrain train ... | tee log` and a Ctrl-C: tee ends first, and the next log line (the stop
  // being said) would end the process by SIGPIPE before its save. Ignored, the write fails.
  ::signal(SIGPIPE, SIG_IGN);
}

int stop_signal() { return g_stop_signal.load(); }

}  // namespace ddptrain
