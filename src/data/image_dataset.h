// ImageDataset: what every dataset of encoded images shares (an image folder,
// data/image_folder.h; WebDataset shards, data/webdataset.h): a sample's bytes, from wherever
// the subclass keeps them, are decoded in the loader threads (data/image_decode.h) and
// transformed as torchvision's references do (data/image_transforms.h):
//  - the header decides the crop box; a JPEG is decoded at the smallest DCT scale that keeps
//    the box at least the output size (jpeg_dct_scaling), a training crop of a JPEG only in its
//    rows and columns, then resampled once to image_size;
//  - the crop and flip are a function of (seed, epoch, index) (Note [Augmentation is a pure
//    function]): the same bytes at the same index give the same sample, whatever holds them.
// A sample that does not decode: BadImagePolicy::kError throws (its name and the reason) from
// the loader thread; kSkip gives the next readable sample in index order instead (the same
// replacement on every rank and epoch, so runs stay deterministic) and the sample is reported
// once by take_skipped().
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "data/data_options.h"
#include "data/datasets.h"
#include "data/image_transforms.h"

namespace ddptrain {

struct ImageOptions {
  int image_size = 224;          // output height and width
  int resize_size = 0;           // evaluation's Resize (shorter side); 0: floor(image_size·8/7), 256 for 224
  bool random_crop = false;      // RandomResizedCrop + flip (training); false: Resize + CenterCrop
  uint64_t seed = 0;             // of the random crops (Note [Augmentation is a pure function])
  bool jpeg_dct_scaling = true;  // decode JPEGs at a reduced DCT scale where the crop allows
  BadImagePolicy bad_images = BadImagePolicy::kError;
  Normalize normalize;
  int resize() const { return resize_size > 0 ? resize_size : image_size * 8 / 7; }
};
using ImageFolderOptions = ImageOptions;  // its first name

class ImageDataset : public Dataset {
 public:
  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  Example get(int64_t index) const override;
  DatasetShape shape() const override;
  void set_epoch(int64_t epoch) override { epoch_.store(epoch); }
  std::vector<std::string> take_skipped() const override;

  int64_t label(int64_t index) const { return labels_[static_cast<size_t>(index)]; }
  /// Sample `index` transformed for `epoch`: (3, S, S) float. ImageError when it does not decode.
  at::Tensor image(int64_t index, int64_t epoch) const;
  /// Where sample `index` is, for messages: a file's path, a shard's member.
  virtual std::string name(int64_t index) const = 0;

 protected:
  /// kind: what a sample is called in messages ("image file"); source: where they all are.
  ImageDataset(ImageOptions opts, std::string kind, std::string source)
      : opts_(opts), kind_(std::move(kind)), source_(std::move(source)) {}
  /// Sample `index`'s encoded bytes; Error when they cannot be read (never skipped: Note [A read
  /// that fails is not a bad image]).
  virtual std::vector<uint8_t> bytes(int64_t index) const = 0;
  virtual int num_classes() const = 0;

  ImageOptions opts_;
  std::vector<int32_t> labels_;

 private:
  std::string kind_, source_;
  std::atomic<int64_t> epoch_{0};
  mutable std::mutex bad_mu_;
  mutable std::set<int64_t> bad_;              // samples found not to decode
  mutable std::vector<std::string> reported_;  // "name: reason", not yet taken
};

}  // namespace ddptrain
