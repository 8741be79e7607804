#include "launch/worker_exit.h"

#include <sys/wait.h>

#include <cstdlib>
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
    const nlohmann::json extra = m.value("extraInfo", nlohmann::json::object());
    const bool secondary = extra.value("secondary", std::string()) == "true";
    const std::string stop = extra.value("stop_signal", std::string("0"));
    return {m.at("message").get<std::string>(), secondary, std::atoi(stop.c_str())};
  } catch (const std::exception&) {
    return {};
  }
}

std::string error_file_of(const std::string& error_dir, int rank) {
  return error_dir + "/error_rank" + std::to_string(rank) + ".json";
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
