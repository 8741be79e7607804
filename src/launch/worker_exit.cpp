#include "launch/worker_exit.h"

#include <sys/wait.h>

#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace ddptrain {

ErrorRecord read_error_file(const std::string& path) {
  std::ifstream in(path);
  if (!in.good()) return {};
  try {
    auto j = nlohmann::json::parse(in);
    const auto& m = j.at("message");
    if (m.is_string()) return {m.get<std::string>(), false};
    bool secondary = m.contains("extraInfo") && m["extraInfo"].value("secondary", std::string()) == "true";
    return {m.at("message").get<std::string>(), secondary};
  } catch (const std::exception&) {
    return {};
  }
}

std::string describe_exit(int status) {
  if (WIFSIGNALED(status))
    return detail::concat("was killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  return detail::concat("exited with code ", WEXITSTATUS(status));
}

int exit_code_of(int status) {
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

}  // namespace ddptrain
