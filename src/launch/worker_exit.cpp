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
    // torchrun's extraInfo values are strings; another tool's may be numbers or booleans.
    const auto text = [&extra](const char* key) {
      if (!extra.is_object() || !extra.contains(key)) return std::string();
      const nlohmann::json& v = extra[key];
      return v.is_string() ? v.get<std::string>() : v.dump();
    };
    return {m.value("message", std::string()), text("secondary") == "true",
            std::atoi(text("stop_signal").c_str())};
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
