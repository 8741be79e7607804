// The image tests' files (Image.*, ImageFolder.*): Pillow's test images, written once per
// process by tests/python/images.py, and its other commands.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

inline std::string images_slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void images_put(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

/// Runs tests/python/images.py ARGS with its output in `log`; "" on success, else the log.
inline std::string images_python(const std::string& args, const std::string& log) {
  const std::string cmd = std::string(DDPTRAIN_PYTHON) + " " + DDPTRAIN_SOURCE_DIR +
                          "/tests/python/images.py " + args + " > " + log + " 2>&1";
  return std::system(cmd.c_str()) == 0 ? "" : images_slurp(log);
}

/// Pillow's test images (images.py write), written once per process.
inline const std::string& images_dir() {
  static const std::string d = [] {
    // Per process: ctest runs each test in its own process, two at a time.
    const std::string dir = testing::TempDir() + "images_unit_" + std::to_string(::getpid());
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const std::string err = images_python("write " + dir, dir + "/py.log");
    EXPECT_EQ(err, "") << err;
    return dir;
  }();
  return d;
}
