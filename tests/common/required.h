// Which of the tests' optional Python packages a suite requires (DDPTRAIN_REQUIRE_TRANSFORMERS=1:
// `make test` and `make test-2.11`, whose install_deps.sh installed them): there a missing
// package fails the test that needs it instead of skipping it, so a broken install cannot turn
// the suite green with the Hugging Face tests skipped. Elsewhere (Debian's torch 1.13, whose
// Python has no transformers) they skip.
#pragma once

#include <cstdlib>
#include <string>

namespace ddptrain::testing_common {

inline bool transformers_required() {
  const char* v = std::getenv("DDPTRAIN_REQUIRE_TRANSFORMERS");
  return v != nullptr && std::string(v) == "1";
}

}  // namespace ddptrain::testing_common
