// The Hugging Face tests' helpers (HfGpt2.*, HfLlama.*): folders made and read by
// transformers itself through tests/python/hf.py, and the comparison of logits.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include "../common/required.h"
#include "util/error.h"

namespace hf_fixtures {

inline std::string hf_dir(const std::string& name) {
  const std::string d = testing::TempDir() + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(d);
  return d;
}

/// One `tests/python/hf.py serve` for the test process, started at the first command: each
/// command paid about 4 s to import torch and transformers, and a test makes up to 11.
class HfPythonServer {
 public:
  HfPythonServer() {
    // Close-on-exec: no other child of the test holds the server's input open past the test.
    int requests[2], replies[2];
    if (::pipe2(requests, O_CLOEXEC) != 0 || ::pipe2(replies, O_CLOEXEC) != 0) return;
    const std::string script = std::string(DDPTRAIN_SOURCE_DIR) + "/tests/python/hf.py";
    pid_ = ::fork();
    if (pid_ == 0) {  // only async-signal-safe calls: the test has threads
      ::dup2(requests[0], 0);
      ::dup2(replies[1], 1);
      ::execl(DDPTRAIN_PYTHON, DDPTRAIN_PYTHON, script.c_str(), "serve", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(requests[0]);
    ::close(replies[1]);
    to_ = ::fdopen(requests[1], "w");
    from_ = ::fdopen(replies[0], "r");
  }
  ~HfPythonServer() {
    if (to_) std::fclose(to_);  // its end of input: the server ends
    if (from_) std::fclose(from_);
    if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
  }
  HfPythonServer(const HfPythonServer&) = delete;
  HfPythonServer& operator=(const HfPythonServer&) = delete;

  /// hf.py ARGS; "" on success, else its output.
  std::string run(const std::string& args) {
    const std::string log = testing::TempDir() + "hf_py_" + std::to_string(::getpid()) + ".log";
    char status[16] = {0};
    if (!to_ || !from_ || std::fprintf(to_, "%s\t%s\n", log.c_str(), args.c_str()) < 0 ||
        std::fflush(to_) != 0 || !std::fgets(status, sizeof status, from_))
      return "tests/python/hf.py serve did not answer (it ended; its errors are in the test's output): " +
             args;
    if (std::string(status) == "0\n") return "";
    std::ifstream in(log);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

 private:
  pid_t pid_ = -1;
  std::FILE* to_ = nullptr;
  std::FILE* from_ = nullptr;
};

/// tests/python/hf.py ARGS (run by the test process's server); "" on success, else its output.
inline std::string hf_python(const std::string& args) {
  static HfPythonServer server;
  return server.run(args);
}

inline bool has_transformers() { return hf_python("check") == ""; }

// A suite that requires transformers (tests/common/required.h) fails here instead.
#define SKIP_WITHOUT_TRANSFORMERS()                                                                   \
  if (!hf_fixtures::has_transformers()) {                                                             \
    if (::ddptrain::testing_common::transformers_required())                                          \
      FAIL() << DDPTRAIN_PYTHON << " has no transformers, which this suite requires "                 \
             << "(DDPTRAIN_REQUIRE_TRANSFORMERS=1; scripts/install_deps.sh test installs it)";        \
    GTEST_SKIP() << DDPTRAIN_PYTHON << " has no transformers (pip's torch builds install it: "        \
                 << "scripts/install_deps.sh test); the Hugging Face tests need transformers itself"; \
  }

inline at::Tensor tokens(int64_t b, int64_t t, int64_t vocab) {
  return ((at::arange(b * t, at::kLong) * 7 + 3) % vocab).reshape({b, t});
}

// transformers' logits (B, T, V) and loss on the same tokens.
inline std::pair<at::Tensor, double> transformers_logits(const std::string& dir, int64_t b, int64_t t,
                                                         int64_t vocab) {
  const std::string out = dir + ".logits";
  const std::string err =
      hf_python("logits " + dir + " " + std::to_string(b) + " " + std::to_string(t) + " " + out);
  EXPECT_EQ(err, "") << err;
  std::ifstream in(out, std::ios::binary);
  at::Tensor l = at::empty({b, t, vocab}, at::kFloat);
  in.read(static_cast<char*>(l.data_ptr()), static_cast<std::streamsize>(l.nbytes()));
  EXPECT_TRUE(in.good()) << out;
  double loss = 0;
  std::ifstream(out + ".loss") >> loss;
  return {l, loss};
}

/// A copy of folder `src` named `name`, with tests/python/hf.py's config KEY=JSON changes applied.
inline std::string hf_variant(const std::string& src, const std::string& name,
                              const std::string& config_change) {
  const std::string v = hf_dir(name);
  std::filesystem::copy(src, v, std::filesystem::copy_options::recursive);
  if (!config_change.empty()) {
    EXPECT_EQ(hf_python("config " + v + " " + config_change), "");
  }
  return v;
}

/// The .safetensors files of a folder, by name, as transformers named them.
inline std::vector<std::string> hf_shards(const std::string& dir) {
  std::vector<std::string> shards;
  for (const auto& f : std::filesystem::directory_iterator(dir))
    if (f.path().extension() == ".safetensors") shards.push_back(f.path().filename().string());
  std::sort(shards.begin(), shards.end());
  return shards;
}

inline std::string folder_error(const std::function<void()>& f) {
  try {
    f();
    return "";
  } catch (const ddptrain::UsageError& e) {
    return e.what();
  }
}

}  // namespace hf_fixtures
