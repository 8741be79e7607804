// The Hugging Face tests' helpers (HfGpt2.*, HfLlama.*): folders made and read by
// transformers itself through tests/python/hf.py, and the comparison of logits.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

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

/// tests/python/hf.py ARGS; "" on success, else its output.
inline std::string hf_python(const std::string& args) {
  const std::string log = testing::TempDir() + "hf_py_" + std::to_string(::getpid()) + ".log";
  const std::string cmd = std::string(DDPTRAIN_PYTHON) + " " + DDPTRAIN_SOURCE_DIR + "/tests/python/hf.py " +
                          args + " > " + log + " 2>&1";
  if (std::system(cmd.c_str()) == 0) return "";
  std::ifstream in(log);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline bool has_transformers() {
  const std::string cmd = std::string(DDPTRAIN_PYTHON) + " -c 'import transformers' > /dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

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
