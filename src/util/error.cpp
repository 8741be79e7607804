#include "util/error.h"

namespace ddptrain::detail {

void assert_fail(const char* cond, const char* file, int line, const std::string& msg) {
  throw Error(concat("internal error (a ddptrain bug, please report): ", cond, " failed at ", file, ":", line,
                     msg.empty() ? "" : ": ", msg));
}

}  // namespace ddptrain::detail
