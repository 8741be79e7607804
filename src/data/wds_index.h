// A WebDataset shard's samples, from its tar index (data/tar_index.h): webdataset's own rules,
// so a shard means to ddptrain what it means to `webdataset.WebDataset(...)`:
//  - a member's name splits into a key and an extension at the first dot of its base name
//    (webdataset's base_plus_ext, `^((?:.*/|)[^.]+)[.]([^/]*)$`: "a/0001.seg.png" is key
//    "a/0001", extension "seg.png"); a name without one is passed over; the extension is
//    lower-cased (ASCII); meta members (a first path component `__*__`, e.g. `__index__`) are
//    passed over; a name holding a newline is split as if the regex's `.` matched it;
//  - consecutive members with the same key are one sample (a key that comes back later is
//    another sample); an extension twice in one sample is an error, as in webdataset.
// For classification each sample needs an image, its member with extension jpg, jpeg or png
// (the first of these present), and a class label, the text of its cls member (else txt): a
// non-negative integer as webdataset's `int(...)` reads it, below 2^20 (a larger number is more
// likely a caption's than a class). A sample without them, or with an image in
// another format only, is a UsageError naming the shard and the key. No LibTorch here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddptrain {

/// webdataset's base_plus_ext: false when `name` has no key and extension (it is passed over).
bool split_sample_name(const std::string& name, std::string* key, std::string* extension);

/// webdataset's meta members (skipped): a first path component `__...__` (`__[^/]*__($|/)`).
bool is_meta_member(const std::string& name);

struct WdsSample {
  std::string key;
  std::string image;   // the image member's name
  int64_t offset = 0;  // of the image's bytes in the shard
  int64_t size = 0;
  int64_t label = 0;
};

/// The samples of the shard at `path`, in archive order (each label read from the shard).
std::vector<WdsSample> webdataset_samples(const std::string& path);

}  // namespace ddptrain
