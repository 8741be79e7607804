#include "data/webdataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "data/image_decode.h"
#include "data/wds_index.h"
#include "util/error.h"
#include "util/files.h"
#include "util/fnv.h"

namespace ddptrain {

WebDatasetDataset::ShardIdentity WebDatasetDataset::identity_of(const struct stat& st) {
  return {static_cast<int64_t>(st.st_size),
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

// Note [Shards indexed at open]
// webdataset reads a shard from its start to its end, one sample after another, and shuffles
// in a buffer; ddptrain's sampler needs sample i wherever it is. Every rank therefore walks
// each shard's headers once at construction (a header is 512 bytes before its member: one
// pread a member, no image read) and keeps, per sample, its shard, its image's offset and size
// and its label (about 40 bytes and the member's name). The index lives in memory only: it is
// cheaper to rebuild than a cache file would be to trust (no staleness check, no write race
// between ranks, no write access to the shards' folder needed).
WebDatasetDataset::WebDatasetDataset(const std::string& pattern, ImageOptions opts, int num_classes)
    : ImageDataset(opts, "image", str("tar shards '", pattern, "'")),
      shards_(files_matching(pattern, "tar shard", "shards/train-*.tar")) {
  int64_t max_label = -1;
  for (size_t s = 0; s < shards_.size(); ++s) {
    struct stat st {};
    DDP_USAGE_CHECK(::stat(shards_[s].c_str(), &st) == 0, "cannot stat tar shard '", shards_[s],
                    "': ", std::strerror(errno));
    identities_.push_back(identity_of(st));
    for (const WdsSample& w : webdataset_samples(shards_[s])) {
      DDP_USAGE_CHECK(num_classes <= 0 || w.label < num_classes, "tar shard '", shards_[s], "', sample '",
                      w.key, "': label ", w.label, " is not below the training split's ", num_classes,
                      " classes (its labels are 0..", num_classes - 1,
                      "): a validation split's classes must be the training split's");
      images_.push_back({static_cast<int32_t>(s), w.offset, w.size});
      labels_.push_back(static_cast<int32_t>(w.label));
      names_ += w.image;
      ends_.push_back(names_.size());
      max_label = std::max(max_label, w.label);
    }
  }
  num_classes_ = num_classes > 0 ? num_classes : static_cast<int>(max_label + 1);
}

uint64_t WebDatasetDataset::files_hash() const {
  uint64_t h = kFnvOffset;
  for (const std::string& s : shards_) h = fnv1a(std::filesystem::path(s).filename().string() + '\n', h);
  size_t begin = 0;
  for (size_t i = 0; i < images_.size(); ++i) {
    h = fnv1a(std::string_view(names_).substr(begin, ends_[i] - begin), h);
    h = fnv1a(std::to_string(images_[i].shard) + ' ' + std::to_string(images_[i].size) + '\n', h);
    begin = ends_[i];
  }
  return h;
}

std::string WebDatasetDataset::name(int64_t index) const {
  const auto i = static_cast<size_t>(index);
  const size_t begin = i == 0 ? 0 : ends_[i - 1];
  return shards_[static_cast<size_t>(images_[i].shard)] + ":" + names_.substr(begin, ends_[i] - begin);
}

std::vector<uint8_t> WebDatasetDataset::bytes(int64_t index) const {
  const Image& im = images_[static_cast<size_t>(index)];
  const int fd = ::open(shards_[static_cast<size_t>(im.shard)].c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)  // Note [A read that fails is not a bad image]
    throw Error(str("cannot open tar shard '", shards_[static_cast<size_t>(im.shard)],
                    "': ", std::strerror(errno),
                    " (bad_images=skip (--bad_images skip) does not skip a read that fails)"));
  struct stat st {};
  const bool same = ::fstat(fd, &st) == 0 && identity_of(st) == identities_[static_cast<size_t>(im.shard)];
  std::vector<uint8_t> out(static_cast<size_t>(same ? im.size : 0));
  errno = 0;
  const bool ok = same && read_fully_at(fd, out.data(), out.size(), im.offset);
  const int err = errno;
  ::close(fd);
  if (!same)
    throw Error(str("tar shard '", shards_[static_cast<size_t>(im.shard)],
                    "' changed since this run indexed it at its start (another file, or written anew: its "
                    "size or modification time differs): its samples would be read at the old "
                    "offsets; restart the run once the shards are final"));
  if (!ok)
    throw Error(str("cannot read ", name(index), " (", im.size, " bytes at offset ", im.offset,
                    "): ", err != 0 ? std::strerror(err) : "the shard is shorter than its index says",
                    " (bad_images=skip (--bad_images skip) does not skip a read that fails)"));
  return out;
}

}  // namespace ddptrain
