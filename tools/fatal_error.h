// How a ddptrain command reports the error that ends it: "error: ..." on stderr, prefixed with
// the rank where the environment names one, and under torchrun or `ddptrain launch` the same
// message in TORCHELASTIC_ERROR_FILE (torchrun's format), which the launcher's root-cause
// report quotes. main() calls it for an exception; cmd_train's std::terminate handler for one
// a backend thread threw (it ended the process by abort: a core, and no message).
#pragma once

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include <c10/util/Exception.h>

#include "util/env.h"
#include "util/error.h"
#include "util/error_file.h"

namespace ddptrain {

/// "[rank r/w] " when RANK and WORLD_SIZE are set, else "".
inline std::string rank_prefix() {
  auto r = env::get("RANK");
  auto w = env::get("WORLD_SIZE");
  return r && w ? "[rank " + *r + "/" + *w + "] " : "";
}

/// Reports msg as the command's fatal error and returns `code`. secondary: a collective broken
/// by another rank's failure (its error file is written from the next second on, so that
/// torchrun's root cause, the earliest file, is the primary failure).
inline int report_fatal(int code, const std::string& msg, bool secondary = false) {
  // Messages of collective failures already name the rank.
  const std::string full = msg.rfind("[rank ", 0) == 0 ? msg : rank_prefix() + msg;
  std::fprintf(stderr, "error: %s\n", full.c_str());
  if (auto path = env::get("TORCHELASTIC_ERROR_FILE")) {
    // torchrun's root cause is the error file with the smallest timestamp, in whole seconds
    // (ties go to the lowest rank).
    if (secondary) {
      const auto now = std::chrono::system_clock::now();
      std::this_thread::sleep_until(std::chrono::ceil<std::chrono::seconds>(now) +
                                    std::chrono::milliseconds(10));
    }
    write_error_file(full, {{"secondary", secondary ? "true" : "false"}});
  }
  return code;
}

/// What an exception that ends a command says: its exit code (2 for a usage error, else 1), its
/// message, and whether it is secondary (a collective another rank's failure broke).
struct FatalError {
  int code = 1;
  std::string message;
  bool secondary = false;
};

inline FatalError describe_fatal(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const UsageError& e) {
    return {2, e.what(), false};
  } catch (const CollectiveError& e) {
    return {1, e.what(), true};
  } catch (const c10::Error& e) {
    return {1, e.what_without_backtrace(), false};
  } catch (const std::exception& e) {
    return {1, e.what(), false};
  } catch (...) {
    return {1, "an exception that is not a std::exception", false};
  }
}

}  // namespace ddptrain
