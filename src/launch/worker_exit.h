// What a worker's end says: its wait status in words and as an exit code, and the error file
// it left (torchrun's contract: the launcher reads the first failure's).
#pragma once

#include <string>

namespace ddptrain {

struct ErrorRecord {
  std::string message;
  bool secondary = false;  // a consequence of another rank's failure (a broken collective)
  int stop_signal = 0;     // not an error: the worker stopped on this signal (tools/fatal_error.h)
};

/// A torchrun-style error file ({"message": {"message": ..., "extraInfo": {...}}}); empty where
/// it is missing or unreadable.
ErrorRecord read_error_file(const std::string& path);

/// The error file the launcher names for a worker (TORCHELASTIC_ERROR_FILE) in its folder.
std::string error_file_of(const std::string& error_dir, int rank);

/// "exited with code N" or "was killed by signal N (NAME)".
std::string describe_exit(int status);

/// The shell's code for a wait status: the exit code, or 128 + the signal.
int exit_code_of(int status);

}  // namespace ddptrain
