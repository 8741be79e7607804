// Token shards (#30 item 1): files written by numpy as nanoGPT and llm.c write them are cut into
// the windows numpy's slices give, in both token widths and across several files; every file
// that is neither format, or does not fit its header or the model's vocabulary, is named.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "data/data_options.h"
#include "data/datasets.h"
#include "data/token_datasets.h"
#include "util/error.h"
#include "util/files.h"

using namespace ddptrain;
namespace fs = std::filesystem;

namespace {

std::string shards_dir(const std::string& name) {
  const std::string d = testing::TempDir() + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string shards_slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void shards_write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// llm.c's 1024-byte header (little-endian int32s), then the tokens as given.
std::string shards_llmc_header(int32_t magic, int32_t version, int32_t count) {
  std::string h(1024, '\0');
  const int32_t v[3] = {magic, version, count};
  std::memcpy(h.data(), v, sizeof v);
  return h;
}

std::string shards_u16(const std::vector<uint16_t>& t) {
  return {reinterpret_cast<const char*>(t.data()), t.size() * 2};
}

// The error the dataset gives for `pattern`, or "" when it opens.
std::string shards_error_of(const std::string& pattern, int block, int vocab) {
  try {
    TokenShardDataset d(pattern, block, vocab);
    for (int64_t i = 0; i < d.size(); ++i) d.get(i);
    return "";
  } catch (const UsageError& e) {
    return e.what();
  }
}

}  // namespace

TEST(TokenShards, WindowsEqualNumpysSlicesInBothFormatsAndWidths) {
  const std::string dir = shards_dir("token_shards_numpy");
  constexpr int kBlock = 64;
  const std::string cmd = std::string(DDPTRAIN_PYTHON) + " " + DDPTRAIN_SOURCE_DIR +
                          "/tests/python/token_shards.py " + dir + " " + std::to_string(kBlock) + " > " +
                          dir + "/py.log 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << shards_slurp(dir + "/py.log");
  for (const std::string name : {"nanogpt", "llmc", "llmc32"}) {
    SCOPED_TRACE(name);
    const std::string want_bytes = shards_slurp(dir + "/" + name + ".windows");
    const int vocab = std::stoi(shards_slurp(dir + "/" + name + ".vocab"));
    TokenShardDataset d(dir + "/" + name + "/*.bin", kBlock, vocab);
    const auto* want = reinterpret_cast<const int64_t*>(want_bytes.data());
    const int64_t n = static_cast<int64_t>(want_bytes.size() / 8 / (kBlock + 1));
    ASSERT_GT(n, 0);
    ASSERT_EQ(d.size(), n);
    EXPECT_EQ(d.shape().block_size, kBlock);
    EXPECT_EQ(d.shape().num_classes, vocab);
    int64_t above_uint16 = 0;
    for (int64_t i = 0; i < n; ++i) {
      const Example e = d.get(i);
      const int64_t* w = want + i * (kBlock + 1);
      ASSERT_TRUE(e.input.equal(at::from_blob(const_cast<int64_t*>(w), {kBlock}, at::kLong)))
          << "window " << i;
      ASSERT_TRUE(e.target.equal(at::from_blob(const_cast<int64_t*>(w + 1), {kBlock}, at::kLong)))
          << "window " << i;
      above_uint16 += e.input.ge(65536).sum().item<int64_t>();
    }
    EXPECT_EQ(above_uint16 > 0, name == "llmc32") << "uint32 tokens read as uint32";
  }
  // Two files of 2050 and 1777 tokens: 32 + 27 windows (each file's remainder unread).
  EXPECT_EQ(TokenShardDataset(dir + "/llmc/*.bin", kBlock, 50257).size(), 2049 / kBlock + 1776 / kBlock);
  EXPECT_EQ(TokenShardDataset(dir + "/llmc/*.bin", kBlock, 50257).num_files(), 2u);
}

TEST(TokenShards, EveryFileThatDoesNotFitIsNamedWithTheReason) {
  const std::string dir = shards_dir("token_shards_bad");
  std::vector<uint16_t> ok(200, 7);
  shards_write(dir + "/odd.bin", "abc");
  shards_write(dir + "/notes.txt", "plain text, no header, not a .bin");
  shards_write(dir + "/version.bin", shards_llmc_header(20240520, 2, 200) + shards_u16(ok));
  shards_write(dir + "/short.bin", shards_llmc_header(20240520, 1, 300) + shards_u16(ok));
  shards_write(dir + "/width.bin", shards_llmc_header(20240801, 7, 200) +
                                       shards_u16(ok));  // uint16 tokens under the uint32 magic
  shards_write(dir + "/few.bin", shards_u16(std::vector<uint16_t>(10, 1)));
  std::vector<uint16_t> late = ok, early = ok;
  late.resize(70000, 3);
  late[69000] = 60000;  // past the first 65,536 tokens: found when its window is read
  early[5] = 50300;
  shards_write(dir + "/late.bin", shards_u16(late));
  shards_write(dir + "/early.bin", shards_u16(early));
  struct Case {
    std::string pattern, says;
  } cases[] = {
      {dir + "/odd.bin", "odd.bin' has 3 bytes: not raw uint16 tokens"},
      {dir + "/notes.txt", "notes.txt' is not a token file: no llm.c header"},
      {dir + "/version.bin",
       "version.bin' has llm.c's magic 20240520 but version 2; ddptrain reads version 1"},
      {dir + "/short.bin",
       "short.bin': its llm.c header says 300 tokens (600 bytes after the 1024-byte header), "
       "but the file has 400"},
      {dir + "/width.bin", "width.bin': its llm.c header says 200 tokens (800 bytes"},
      {dir + "/few.bin", "holds 10 tokens in 1 file: too few for one window of block_size + 1 = 65"},
      {dir + "/nothing_*.bin", "nothing_*.bin' matches no file"},
      {dir + "/early.bin", "early.bin': token 5 is 50300, not below the model's vocab_size 50257"},
      {dir + "/late.bin", "late.bin': token 69000 is 60000, not below the model's vocab_size 50257"},
  };
  for (const Case& c : cases) {
    const std::string e = shards_error_of(c.pattern, 64, 50257);
    EXPECT_NE(e.find(c.says), std::string::npos) << c.pattern << ": " << e;
  }
  // The early one fails at open, before any window is asked for.
  EXPECT_THROW(TokenShardDataset(dir + "/early.bin", 64, 50257), UsageError);
  EXPECT_NO_THROW(TokenShardDataset(dir + "/late.bin", 64, 50257));
  // 2-byte tokens for a vocabulary past 65,536 (Llama 3's 128,256) wrapped when written: refused,
  // whether raw or under llm.c's uint16 header; uint32 tokens of that vocabulary open.
  std::vector<uint32_t> wide(200, 70000);
  shards_write(dir + "/wide.bin",
               shards_llmc_header(20240801, 7, 200) +
                   std::string(reinterpret_cast<const char*>(wide.data()), wide.size() * 4));
  EXPECT_NO_THROW(TokenShardDataset(dir + "/wide.bin", 64, 128256));
  shards_write(dir + "/narrow.bin", shards_llmc_header(20240520, 1, 200) + shards_u16(ok));
  for (const char* narrow : {"/narrow.bin", "/late.bin"})
    EXPECT_NE(shards_error_of(dir + narrow, 64, 128256)
                  .find("' holds 2-byte tokens (ids below 65,536) but the model's vocab_size is 128256"),
              std::string::npos)
        << narrow;
  EXPECT_NO_THROW(TokenShardDataset(dir + "/narrow.bin", 64, 65536));
  // Token ids written raw as int64 (numpy's default) or uint32 read as uint16 with zeros between
  // them, every one below the vocabulary: refused (before, a run trained on mostly zeros).
  std::vector<uint16_t> as_int64, as_uint32;
  for (uint16_t id = 1; id <= 200; ++id) {
    as_int64.insert(as_int64.end(), {id, 0, 0, 0});
    as_uint32.insert(as_uint32.end(), {id, 0});
  }
  shards_write(dir + "/int64.bin", shards_u16(as_int64));
  shards_write(dir + "/uint32.bin", shards_u16(as_uint32));
  for (const char* wider : {"/int64.bin", "/uint32.bin"})
    EXPECT_NE(shards_error_of(dir + wider, 64, 50257).find("looks like 4- or 8-byte tokens written raw"),
              std::string::npos)
        << wider;
  // A file with an odd name but a valid llm.c header is read.
  shards_write(dir + "/named.tokens", shards_llmc_header(20240520, 1, 200) + shards_u16(ok));
  EXPECT_EQ(TokenShardDataset(dir + "/named.tokens", 64, 50257).size(), 199 / 64);
  // Dataset::files_hash: the files' names and sizes in order, not their folder (data may move).
  std::filesystem::create_directories(dir + "/moved");
  std::filesystem::copy_file(dir + "/named.tokens", dir + "/moved/named.tokens");
  std::filesystem::copy_file(dir + "/named.tokens", dir + "/renamed.tokens");
  const auto files_of = [](const std::string& p) { return TokenShardDataset(p, 64, 50257).files_hash(); };
  EXPECT_NE(files_of(dir + "/named.tokens"), 0u);
  EXPECT_EQ(files_of(dir + "/named.tokens"), files_of(dir + "/moved/named.tokens"));
  EXPECT_NE(files_of(dir + "/named.tokens"), files_of(dir + "/renamed.tokens"));
}

TEST(TokenShards, DataOptionsNameTheShardFields) {
  DataOptions d;
  d.dataset = DatasetKind::kTokenShards;
  try {
    d.validate();
    ADD_FAILURE() << "token_shards without data_path accepted";
  } catch (const OptionError& e) {
    EXPECT_NE(std::string(e.what()).find("DataOptions::data_path"), std::string::npos) << e.what();
  }
  d.data_path = "train.bin";
  d.val_path = "val.bin";
  EXPECT_NO_THROW(d.validate());
  d.dataset = DatasetKind::kText;
  try {
    d.validate();
    ADD_FAILURE() << "val_path accepted for text";
  } catch (const OptionError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("DataOptions::val_path='val.bin' is the validation shards of", 0),
              0u)
        << e.what();
  }
}

// A training pattern that takes the validation file too ('data/*.bin' in nanoGPT's folder, which
// holds val.bin), or names it by another path, would score the model on samples it trains on:
// refused, naming both fields and the file. Disjoint splits open.
TEST(TokenShards, AValidationFileInTheTrainingPatternIsRefused) {
  const std::string dir = shards_dir("shards_overlap");
  std::vector<uint16_t> t(300);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<uint16_t>(i % 50);
  shards_write(dir + "/train.bin", shards_u16(t));
  shards_write(dir + "/val.bin", shards_u16(t));
  fs::create_symlink(dir + "/val.bin", dir + "/val_alias.bin");
  DataOptions d;
  d.dataset = DatasetKind::kTokenShards;
  const auto error_of = [&](const std::string& train, const std::string& val) -> std::string {
    d.data_path = train;
    d.val_path = val;
    try {
      make_datasets(d, {16, 64});
      return "";
    } catch (const OptionError& e) {
      return e.what();
    }
  };
  EXPECT_EQ(error_of(dir + "/train.bin", dir + "/val.bin"), "");
  for (const std::string& val : {dir + "/val.bin", dir + "/val_alias.bin"}) {
    const std::string e = error_of(dir + "/*.bin", val);
    EXPECT_NE(e.find("DataOptions::val_path='" + val + "' and DataOptions::data_path='" + dir +
                     "/*.bin' both name '"),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("score the model on samples it trains on"), std::string::npos) << e;
  }
}

// A seeded mutation loop over the shard reader (#30's fuzz targets): valid files of both
// formats with bytes flipped (the header's above all), cut short or grown; each opens and
// reads every window, or fails with a UsageError that names the file. Never another error,
// a crash or a hang.
TEST(TokenShards, MutatedFilesOpenOrFailNamingTheFile) {
  const std::string dir = shards_dir("token_shards_fuzz");
  std::vector<uint16_t> tokens(700);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i * 37 % 300);
  const std::string seeds[] = {shards_u16(tokens), shards_llmc_header(20240520, 1, 700) + shards_u16(tokens),
                               shards_llmc_header(20240801, 7, 350) + shards_u16(tokens)};
  const auto open_fds = [] {
    return std::distance(fs::directory_iterator("/proc/self/fd"), fs::directory_iterator{});
  };
  const auto fds_before = open_fds();
  std::mt19937 rng(20261203);
  int opened = 0, refused = 0;
  for (int round = 0; round < 600; ++round) {
    std::string bytes = seeds[round % 3];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const uint32_t kind = rng() % 4;
      const size_t at = rng() % (kind == 0 && bytes.size() > 1024 ? 12 : std::max<size_t>(bytes.size(), 1));
      if (kind <= 1 && !bytes.empty())
        bytes[at % bytes.size()] = static_cast<char>(rng());  // a byte (kind 0: of the header's first 12)
      else if (kind == 2)
        bytes.resize(rng() % (bytes.size() + 1));  // cut short
      else
        bytes.append(rng() % 9, static_cast<char>(rng()));  // grown
    }
    const std::string path = dir + "/m" + std::to_string(round % 7) + ".bin";
    shards_write(path, bytes);
    try {
      TokenShardDataset d(path, 16, 300);
      for (int64_t i = 0; i < d.size(); ++i) d.get(i);
      ++opened;
    } catch (const UsageError& e) {
      ++refused;
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << "round " << round << ": " << e.what();
    }
  }
  std::printf("600 mutated files: %d read, %d refused naming the file\n", opened, refused);
  EXPECT_GT(opened, 0);
  EXPECT_GT(refused, 0);
  EXPECT_EQ(open_fds(), fds_before) << "a refused file's descriptor stayed open";
}

// A path that names a file is that file, also when its name holds glob's characters:
// 'train[1].bin' read train1.bin (a bracket is a character class), or matched nothing.
TEST(TokenShards, AFileNamedWithGlobCharactersIsThatFile) {
  const std::string d = shards_dir("glob_chars");
  std::ofstream(d + "/train[1].bin") << "x";
  std::ofstream(d + "/train1.bin") << "y";
  EXPECT_EQ(files_matching(d + "/train[1].bin", "file", "x"), std::vector<std::string>{d + "/train[1].bin"});
  EXPECT_EQ(files_matching(d + "/train[0-9].bin", "file", "x"), std::vector<std::string>{d + "/train1.bin"});
}
