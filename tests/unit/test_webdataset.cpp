// WebDataset shards (#30 item 3): the tar index equals what Python's tarfile reads in each of
// its formats; samples group as webdataset groups them (its key regex, consecutive keys, meta
// members); every shard the index refuses is named with the reason; the shards of an image
// folder give the folder's images, index for index; a seeded mutation loop over shards.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "data/image_folder.h"
#include "data/tar_index.h"
#include "data/wds_index.h"
#include "data/webdataset.h"
#include "image_fixtures.h"
#include "util/error.h"

using namespace ddptrain;
namespace fs = std::filesystem;

namespace {

std::string wds_dir(const std::string& name) {
  const std::string d = testing::TempDir() + name + "_" + std::to_string(::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

/// tests/python/wds.py ARGS; "" on success, else its output.
std::string wds_python(const std::string& args, const std::string& log) {
  const std::string cmd = std::string(DDPTRAIN_PYTHON) + " " + DDPTRAIN_SOURCE_DIR + "/tests/python/wds.py " +
                          args + " > " + log + " 2>&1";
  return std::system(cmd.c_str()) == 0 ? "" : images_slurp(log);
}

// The header's checksum field computed from its other bytes.
std::string with_checksum(std::string h) {
  std::memset(&h[148], ' ', 8);
  unsigned sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  std::snprintf(&h[148], 8, "%06o", sum);
  h[155] = ' ';
  return h;
}

// A ustar header for a member of `size` bytes, as tar writes one.
std::string tar_header(const std::string& name, size_t size, char type = '0') {
  std::string h(512, '\0');
  std::memcpy(&h[0], name.data(), std::min<size_t>(name.size(), 100));
  std::snprintf(&h[100], 8, "%07o", 0644);
  std::snprintf(&h[108], 8, "%07o", 0);
  std::snprintf(&h[116], 8, "%07o", 0);
  std::snprintf(&h[124], 12, "%011zo", size);
  std::snprintf(&h[136], 12, "%011o", 0);
  h[156] = type;
  std::memcpy(&h[257],
              "ustar\0"
              "00",
              8);
  return with_checksum(h);
}

std::string tar_entry(const std::string& name, const std::string& data, char type = '0') {
  return tar_header(name, data.size(), type) + data + std::string((512 - data.size() % 512) % 512, '\0');
}

std::string tar_of(const std::vector<std::pair<std::string, std::string>>& members) {
  std::string t;
  for (const auto& [name, data] : members) t += tar_entry(name, data);
  return t + std::string(1024, '\0');
}

std::string shard_error(const std::function<void()>& f) {
  try {
    f();
    return "";
  } catch (const UsageError& e) {
    return e.what();
  }
}

ImageOptions small(bool random_crop = false) {
  ImageOptions o;
  o.image_size = 32;
  o.random_crop = random_crop;
  o.seed = 5;
  return o;
}

}  // namespace

TEST(TarIndex, MembersAreWhatTarfileReadsInEachFormat) {
  const std::string d = wds_dir("tar_formats");
  const std::string err = wds_python("formats " + d, d + "/py.log");
  ASSERT_EQ(err, "") << err;
  for (const char* name : {"ustar", "gnu", "pax", "big_gnu", "big_pax"}) {
    std::istringstream want(images_slurp(d + "/" + name + ".members"));
    std::vector<std::string> expected, got;
    for (std::string line; std::getline(want, line);) expected.push_back(line);
    for (const TarMember& m : tar_members(d + "/" + name + ".tar"))
      got.push_back(std::to_string(m.offset) + " " + std::to_string(m.size) + " " + m.name);
    EXPECT_EQ(got, expected) << name;
    EXPECT_GE(expected.size(), std::string(name).rfind("big", 0) == 0 ? 1u : 4u)
        << name << ": too few to mean much";
  }
}

TEST(Webdataset, KeysSplitAsWebdatasetsRegex) {
  const std::vector<std::string> names = {"0001.jpg",
                                          "a/0001.seg.png",
                                          "dir.x/0001.jpg",
                                          "noext",
                                          ".hidden",
                                          "a/.x.jpg",
                                          "a.b/.x.jpg",
                                          "/.x",
                                          "a//.x",
                                          "a/b/c.d.e/f.g",
                                          "x.",
                                          "a/b.c/d",
                                          "./0001.cls",
                                          "..",
                                          "a/..",
                                          "k.JPG",
                                          "__key__",
                                          "a b/c d.txt",
                                          "a/b/.c/.d.e",
                                          "n\xc3\xa4me/\xc3\xbc.cls"};
  const std::string d = wds_dir("wds_split");
  std::string list;
  for (const auto& n : names) list += n + "\n";
  images_put(d + "/names", list);
  const std::string err = wds_python("split " + d + "/names " + d + "/out", d + "/py.log");
  ASSERT_EQ(err, "") << err;
  std::istringstream want(images_slurp(d + "/out"));
  int matched = 0;
  for (const auto& n : names) {
    std::string line, key, ext;
    ASSERT_TRUE(std::getline(want, line));
    const bool ok = split_sample_name(n, &key, &ext);
    EXPECT_EQ(ok ? key + "\t" + ext : "-", line) << "name '" << n << "'";
    matched += ok;
  }
  EXPECT_GT(matched, 5);
  EXPECT_LT(matched, static_cast<int>(names.size()));
  EXPECT_TRUE(is_meta_member("__key__") && is_meta_member("__a__/x.jpg") && is_meta_member("____"));
  EXPECT_FALSE(is_meta_member("__a") || is_meta_member("a/__key__") || is_meta_member("__a/b__"));
}

TEST(TarIndex, StackedLongNamesAndFoldersReadAsTarfileReadsThem) {
  const std::string d = wds_dir("tar_stacked");
  // Two long names before one member: the first wins; an old-style folder "f/" with a size
  // carries no data (the next header follows at once).
  images_put(d + "/s.tar", tar_entry("././@LongLink", "first.jpg", 'L') +
                               tar_entry("././@LongLink", "second.jpg", 'L') + tar_entry("ignored", "J") +
                               tar_header("f/", 1000, '\0') + tar_entry("pax", "15 path=p.cls/\n", 'x') +
                               tar_entry("q.cls", "7") + std::string(1024, '\0'));
  std::vector<std::string> names;
  for (const TarMember& m : tar_members(d + "/s.tar")) names.push_back(m.name);
  EXPECT_EQ(names, (std::vector<std::string>{"first.jpg", "p.cls"}));
}

TEST(Webdataset, SamplesGroupAsWebdatasetGroupsThem) {
  const std::string d = wds_dir("wds_group");
  images_put(d + "/s.tar", tar_of({{"a/1.jpg", "J1"},
                                   {"a/1.cls", "4"},
                                   {"__index__", "meta"},
                                   {"noext", "?"},
                                   {"b.JPG", "J2"},
                                   {"b.png", "P2"},
                                   {"b.txt", " +7\n"},
                                   {"b.json", "{}"},
                                   {"c.png", "P3"},
                                   {"c.cls", "0"},
                                   {"a/1.jpg", "J4"},
                                   {"a/1.cls", "12"}}));
  const std::vector<WdsSample> s = webdataset_samples(d + "/s.tar");
  ASSERT_EQ(s.size(), 4u);
  const std::vector<std::string> keys = {s[0].key, s[1].key, s[2].key, s[3].key};
  EXPECT_EQ(keys, (std::vector<std::string>{"a/1", "b", "c", "a/1"}))
      << "a key that comes back is a new sample";
  EXPECT_EQ(s[1].image, "b.JPG") << "jpg before png; the extension compared lower-cased";
  EXPECT_EQ(s[2].image, "c.png");
  const std::vector<int64_t> labels = {s[0].label, s[1].label, s[2].label, s[3].label};
  EXPECT_EQ(labels, (std::vector<int64_t>{4, 7, 0, 12}));
  std::ifstream in(d + "/s.tar", std::ios::binary);
  for (const auto& [sample, bytes] : {std::pair{s[0], "J1"}, {s[1], "J2"}, {s[3], "J4"}}) {
    std::string got(static_cast<size_t>(sample.size), '\0');
    in.seekg(sample.offset);
    in.read(got.data(), static_cast<std::streamsize>(got.size()));
    EXPECT_EQ(got, bytes);
  }
}

TEST(Webdataset, EveryShardItRefusesIsNamedWithTheReason) {
  const std::string d = wds_dir("wds_errors");
  const std::string good = tar_of({{"a.jpg", "J"}, {"a.cls", "1"}, {"b.jpg", "J"}, {"b.cls", "2"}});
  std::string bad_sum = good, bad_size = good, bad_first = good;
  bad_sum[1024 + 20] ^= 1;  // the second header
  std::memcpy(&bad_size[124], "00000x00001", 11);
  bad_size = with_checksum(bad_size.substr(0, 512)) + bad_size.substr(512);
  bad_first[148] ^= 1;
  std::string sparse = tar_entry("s.jpg", "J", 'S') + std::string(1024, '\0');
  const std::string pax_bad = tar_entry("pax", "99 path=x\n", 'x') + good;
  std::string huge = tar_header("a.jpg", 0);  // GNU base-256 size 0x7FFF...FE: no overflow
  huge[124] = static_cast<char>(0x80);
  std::memset(&huge[125], 0, 11);
  for (int i = 0; i < 7; ++i) huge[128 + i] = static_cast<char>(i == 0 ? 0x7f : 0xff);
  huge[135] = static_cast<char>(0xfe);
  huge = with_checksum(huge) + good;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {tar_of({{"a.jpg", "J"}, {"a.jpg", "K"}, {"a.cls", "1"}}), "the extension 'jpg' twice"},
      {tar_of({{"a.jpg", "J"}}), "sample 'a': it has no class label"},
      {tar_of({{"a.jpg", "J"}, {"a.cls", "cat"}}), "'a.cls' is not a class label"},
      {tar_of({{"a.jpg", "J"}, {"a.cls", "-1"}}), "'a.cls' is not a class label"},
      {tar_of({{"a.jpg", "J"}, {"a.cls", "99999999999"}}), "is not a class label"},
      {tar_of({{"a.jpg", "J"}, {"a.cls", std::string(100, '1')}}), "has 100 bytes"},
      {tar_of({{"a.json", "{}"}, {"a.cls", "1"}}),
       "no image member (.jpg, .jpeg or .png); its members: a.cls, a.json"},
      {tar_of({{"a.webp", "W"}, {"a.cls", "1"}}), "'a.webp' is in a format ddptrain does not decode"},
      {std::string("\x1f\x8b\x08\x00", 4) + std::string(600, '\0'), "is gzip-compressed"},
      {bad_first, "not a tar archive"},
      {bad_sum, "checksum does not match (a damaged archive) at byte 1024"},
      {bad_size, "size field is not a number"},
      {good.substr(0, 512), "a member of 1 bytes cut short"},
      {good.substr(0, 2048 + 1), "a header cut short by the file's end (1 of 512 bytes)"},
      {tar_header("a.jpg", 5000) + "J", "cut short by the file's end"},
      {std::string(2048, '\0'), "holds no sample"},
      {sparse, "sparse file"},
      {pax_bad, "pax header"},
      {tar_entry("pax", "10 path=x\n", 'g') + good, "global pax header setting 'path'"},
      {tar_entry("pax", "10 size=q\n", 'x') + good, "pax size 'q' that is not a number"},
      {huge, "a member of 9223372036854775806 bytes cut short"},
      {good.substr(0, 4096) + tar_entry("././@LongLink", "late.jpg", 'L'), "with no member after it"},
      {tar_of({{"a.jpg", "J"}, {"a.cls", "1048576"}}),
       "'a.cls' is not a class label (a non-negative integer below 1048576"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = d + "/case" + std::to_string(i) + ".tar";
    images_put(path, cases[i].first);
    const std::string e = shard_error([&] { webdataset_samples(path); });
    EXPECT_NE(e.find("'" + path + "'"), std::string::npos) << "case " << i << ": " << e;
    EXPECT_NE(e.find(cases[i].second), std::string::npos) << "case " << i << ": " << e;
  }
  EXPECT_NE(shard_error([&] { WebDatasetDataset(d + "/none_*.tar", small()); }).find("matches no file"),
            std::string::npos);
  EXPECT_NE(shard_error([&] { webdataset_samples(d); }).find("is not a regular file"), std::string::npos);
}

TEST(Webdataset, ShardsOfAFolderGiveTheFoldersImagesIndexForIndex) {
  const std::string d = wds_dir("wds_folder");
  const std::string root = d + "/folder";
  const std::vector<std::pair<std::string, std::string>> files = {{"cat/1.jpg", "photo.jpg"},
                                                                  {"cat/2.png", "wide.png"},
                                                                  {"dog/x/3.jpeg", "grey.jpg"},
                                                                  {"dog/4.JPG", "tall.png"},
                                                                  {"emu/5.jpg", "progressive.jpg"}};
  for (const auto& [path, image] : files) {
    fs::create_directories(fs::path(root + "/" + path).parent_path());
    fs::copy_file(images_dir() + "/" + image, root + "/" + path);
  }
  const std::string err = wds_python("from_folder " + root + " " + d + "/train 2", d + "/py.log");
  ASSERT_EQ(err, "") << err;
  for (bool crop : {true, false}) {
    ImageFolderDataset folder(root, small(crop));
    WebDatasetDataset shards(d + "/train-*.tar", small(crop));
    ASSERT_EQ(shards.size(), folder.size());
    EXPECT_EQ(shards.num_shards(), 3u);
    EXPECT_EQ(shards.shape().num_classes, 3);
    for (int64_t i = 0; i < folder.size(); ++i) {
      EXPECT_EQ(shards.label(i), folder.label(i)) << i;
      for (int64_t epoch : {1, 2})
        EXPECT_TRUE(shards.image(i, epoch).equal(folder.image(i, epoch)))
            << "sample " << i << " epoch " << epoch;
    }
    EXPECT_EQ(shards.name(3), d + "/train-000001.tar:dog/x/3.jpeg");
  }
  // A validation split takes the training split's classes; a label beyond them is named.
  images_put(d + "/val.tar", tar_of({{"v.png", images_slurp(images_dir() + "/wide.png")}, {"v.cls", "3"}}));
  EXPECT_EQ(WebDatasetDataset(d + "/val.tar", small(), 4).shape().num_classes, 4);
  const std::string e = shard_error([&] { WebDatasetDataset(d + "/val.tar", small(), 3); });
  EXPECT_NE(e.find("sample 'v': label 3 is not below the training split's 3 classes"), std::string::npos)
      << e;
}

TEST(Webdataset, AnImageThatDoesNotDecodeIsNamedOrSkippedAndReportedOnce) {
  const std::string d = wds_dir("wds_bad");
  const std::string png = images_slurp(images_dir() + "/wide.png");
  images_put(d + "/s.tar", tar_of({{"a.png", png},
                                   {"a.cls", "0"},
                                   {"b.jpg", "not a JPEG"},
                                   {"b.cls", "1"},
                                   {"c.png", images_slurp(images_dir() + "/tall.png")},
                                   {"c.cls", "2"}}));
  WebDatasetDataset strict(d + "/s.tar", small());
  const std::string e = shard_error([&] { strict.get(1); });
  EXPECT_NE(e.find("image '" + d + "/s.tar:b.jpg' does not decode"), std::string::npos) << e;
  ImageOptions o = small();
  o.bad_images = BadImagePolicy::kSkip;
  WebDatasetDataset lenient(d + "/s.tar", o);
  EXPECT_TRUE(lenient.get(1).input.equal(lenient.get(2).input))
      << "b's place is taken by the next readable image";
  EXPECT_FALSE(lenient.get(1).input.equal(lenient.get(0).input));
  EXPECT_EQ(lenient.get(1).target.item<int64_t>(), 2) << "b's place and label are c's";
  EXPECT_EQ(lenient.take_skipped().size(), 1u);
  lenient.get(1);
  EXPECT_TRUE(lenient.take_skipped().empty()) << "reported once";
}

// A shard replaced after the index was built (a sync's rename, a conversion run again) is named
// at its next read: its samples were read at the old index's offsets, another member's bytes
// under the old label.
TEST(Webdataset, AShardReplacedDuringTheRunIsNamedNotReadAtTheOldOffsets) {
  const std::string d = wds_dir("wds_replaced");
  const std::string png = images_slurp(images_dir() + "/wide.png");
  images_put(d + "/s.tar", tar_of({{"a.png", png}, {"a.cls", "0"}}));
  WebDatasetDataset data(d + "/s.tar", small());
  data.get(0);
  images_put(d + "/new.tar", tar_of({{"b.txt", "x"}, {"a.png", png}, {"a.cls", "1"}}));
  fs::rename(d + "/new.tar", d + "/s.tar");
  std::string e;
  try {
    data.get(0);
  } catch (const Error& x) {
    e = x.what();
  }
  EXPECT_NE(e.find("tar shard '" + d + "/s.tar' changed since this run indexed it"), std::string::npos) << e;
}

TEST(Webdataset, MutatedShardsIndexOrFailNamingTheShard) {
  const std::string d = wds_dir("wds_fuzz");
  const std::string jpg = images_slurp(images_dir() + "/grey.jpg"),
                    png = images_slurp(images_dir() + "/wide.png");
  const std::string seeds[] = {
      tar_of({{"a.jpg", jpg}, {"a.cls", "1"}, {"b.png", png}, {"b.cls", "2"}}),
      tar_entry("././@LongLink", std::string(150, 'k') + ".png", 'L') + tar_entry("ignored", png) +
          tar_entry("x", "164 path=" + std::string(150, 'k') + ".cls\n", 'x') + tar_entry("y", "3") +
          tar_entry("z.jpg", jpg) + tar_entry("z.cls", "0") + std::string(1024, '\0'),
  };
  const auto open_fds = [] {
    return std::distance(fs::directory_iterator("/proc/self/fd"), fs::directory_iterator{});
  };
  const auto fds_before = open_fds();
  ASSERT_EQ(webdataset_samples((images_put(d + "/seed.tar", seeds[1]), d + "/seed.tar")).size(), 2u)
      << "the long-name seed is not two samples: the loop would not reach its members";
  std::mt19937 rng(20261204);
  int indexed = 0, refused = 0, images = 0;
  for (int round = 0; round < 600; ++round) {
    std::string bytes = seeds[round % 2];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const uint32_t kind = rng() % 4;
      const size_t header = 512 * (rng() % (bytes.size() / 512 + 1));  // a block's start
      if (kind <= 1 && !bytes.empty())  // a byte: kind 0 in a block's first 512 (a header), 1 anywhere
        bytes[(kind == 0 ? header + rng() % 512 : rng()) % bytes.size()] = static_cast<char>(rng());
      else if (kind == 2)
        bytes.resize(rng() % (bytes.size() + 1));  // cut short
      else
        bytes.append(rng() % 600, static_cast<char>(rng()));  // grown
    }
    const std::string path = d + "/m" + std::to_string(round % 7) + ".tar";
    images_put(path, bytes);
    try {
      WebDatasetDataset w(path, small(round % 3 == 0));
      ++indexed;
      for (int64_t i = 0; i < w.size(); ++i) {
        try {
          w.get(i);
          ++images;
        } catch (const UsageError& e) {
          EXPECT_NE(std::string(e.what()).find(path + ":"), std::string::npos)
              << "round " << round << ": " << e.what();
        }
      }
    } catch (const UsageError& e) {
      ++refused;
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << "round " << round << ": " << e.what();
    }
  }
  std::printf("600 mutated shards: %d indexed (%d images decoded), %d refused naming the shard\n", indexed,
              images, refused);
  EXPECT_GT(indexed, 0);
  EXPECT_GT(images, 0);
  EXPECT_GT(refused, 0);
  EXPECT_EQ(open_fds(), fds_before) << "a shard's descriptor stayed open";
}
