// Graceful stop on SIGTERM/SIGINT (and SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2, each where it has
// its default action: not ignored (nohup), nor handled by the program): the signal is
// recorded instead of killing the process;
// the trainer stops at the next step boundary that every rank agrees on, writes a
// checkpoint (checkpoint.on_signal; --checkpoint_on_signal) and the process exits with 128 + signal.
// A second signal 2 s or more later ends the process at once (Note [A second stop signal]).
// The recorded signal is process-wide state (a signal handler cannot be handed a context), so
// it belongs to the program: the program installs the handlers and hands stop_signal to the
// Trainer as TrainerOptions::stop_requested (the library never reads it by itself).
#pragma once

namespace ddptrain {

/// Installs the handlers (idempotent), and ignores SIGPIPE (a closed output must not end the
/// run before it saves).
void install_stop_handlers();
/// The first stop signal received, or 0.
int stop_signal();

}  // namespace ddptrain
