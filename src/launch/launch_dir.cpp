#include "launch/launch_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "util/error.h"

namespace ddptrain {

std::string make_launch_dir(OutputSink& err) {
  std::vector<std::string> parents;
  if (const char* tmp = std::getenv("TMPDIR"); tmp && *tmp && std::string(tmp) != "/tmp")
    parents.emplace_back(tmp);
  parents.emplace_back("/tmp");
  std::string tried;
  for (const std::string& parent : parents) {
    std::string tmpl = parent + "/ddptrain-launch-XXXXXX";
    if (::mkdtemp(tmpl.data()) != nullptr) {
      if (!tried.empty()) say(err, "launch: %s; its folder is %s\n", tried.c_str(), tmpl.c_str());
      return tmpl;
    }
    tried += detail::concat(tried.empty() ? "cannot make " : "; ", tmpl, ": ", std::strerror(errno));
  }
  throw Error(detail::concat("launch: ", tried, ": free space there, or set TMPDIR to a writable folder"));
}

}  // namespace ddptrain
