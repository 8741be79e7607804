// WebDatasetDataset (--dataset webdataset): images in WebDataset tar shards, each sample the
// members that share a key (data/wds_index.h: "0001.jpg" and "0001.cls"), read by index.
//  - The shards a glob names (sorted by name) are indexed once at construction: their headers
//    and labels are read, not their images (Note [Shards indexed at open]); sample i is then
//    the i-th sample of the shards in order, read with one pread of its image member and
//    decoded and transformed as every image dataset (data/image_dataset.h). So the sampler's
//    shuffling, exactly-once epochs, resume mid-epoch and at another world size work as for
//    an image folder, and the folder's images written as shards in its order train on the
//    same batches.
//  - Classes: a sample's label is its .cls member (else .txt), an integer; the training split
//    has max label + 1 classes, and a validation split gets the training split's number (a
//    label at or above it is an error, not a new class).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/image_dataset.h"

struct stat;

namespace ddptrain {

class WebDatasetDataset : public ImageDataset {
 public:
  /// pattern: the shards (a glob or a path). num_classes: the training split's (for a
  /// validation split); 0: max label + 1. UsageError naming the shard (and sample) for
  /// anything its index refuses (data/tar_index.h, data/wds_index.h), a label at or above a
  /// given num_classes, or a pattern that matches no file.
  explicit WebDatasetDataset(const std::string& pattern, ImageOptions opts = {}, int num_classes = 0);
  std::string name(int64_t index) const override;  // "SHARD:MEMBER"
  size_t num_shards() const { return shards_.size(); }
  /// The shards' names, and each sample's member name and size, in order.
  uint64_t files_hash() const override;

 protected:
  std::vector<uint8_t> bytes(int64_t index) const override;
  int num_classes() const override { return num_classes_; }

 private:
  struct Image {
    int32_t shard = 0;
    int64_t offset = 0;  // of its bytes in the shard
    int64_t size = 0;
  };
  /// A shard as indexed: a shard replaced since (another file, or written anew) is an error
  /// at its next read, not the new file's bytes at the old index's offsets. By size and
  /// modification time (FUSE mounts of object stores give a file new inode numbers over time).
  struct ShardIdentity {
    int64_t size = 0, mtime_ns = 0;
    bool operator==(const ShardIdentity& o) const { return size == o.size && mtime_ns == o.mtime_ns; }
  };
  static ShardIdentity identity_of(const struct stat& st);
  std::vector<std::string> shards_;
  std::vector<ShardIdentity> identities_;  // per shard, when indexed
  std::vector<Image> images_;
  std::string names_;         // each sample's image member name, back to back
  std::vector<size_t> ends_;  // where each name ends in names_
  int num_classes_ = 0;
};

}  // namespace ddptrain
