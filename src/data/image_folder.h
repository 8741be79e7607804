// ImageFolderDataset (--dataset image_folder): torchvision's ImageFolder layout, a folder of
// class folders of JPEG and PNG files (ImageNet's), decoded in the loader threads
// (data/image_decode.h) and transformed as torchvision's references do (data/image_transforms.h).
//  - Classes are the class folders' names in sorted order, labelled 0..K-1; a validation
//    split is labelled by the training split's classes (a class folder it lacks is an error,
//    not a shifted label). Each class folder is walked recursively, following links, and its
//    files sorted by (folder, name), as torchvision's make_dataset: the same index for the same
//    file.
//  - Files ending .jpg, .jpeg or .png (any case) are samples, whatever their bytes (the
//    decoder goes by the first bytes: a PNG named .JPEG decodes); other image formats
//    torchvision reads (.bmp, .ppm, .pgm, .tif, .tiff, .webp) are an error naming one (they
//    would be silently left out); other files are ignored, as torchvision does.
//  - A sample is read whole (one small file), its header decides the crop box, and a JPEG is
//    decoded at the smallest DCT scale that keeps the box at least the output size
//    (jpeg_dct_scaling), then resampled once to image_size.
//  - A file that does not decode: BadImagePolicy::kError throws (file and reason) from the
//    loader thread; kSkip gives the next readable sample in index order instead (the same
//    replacement on every rank and epoch, so runs stay deterministic) and the file is
//    reported once by take_skipped().
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

struct ImageFolderOptions {
  int image_size = 224;          // output height and width
  int resize_size = 0;           // evaluation's Resize (shorter side); 0: floor(image_size·8/7), 256 for 224
  bool random_crop = false;      // RandomResizedCrop + flip (training); false: Resize + CenterCrop
  uint64_t seed = 0;             // of the random crops (Note [Augmentation is a pure function])
  bool jpeg_dct_scaling = true;  // decode JPEGs at a reduced DCT scale where the crop allows
  BadImagePolicy bad_images = BadImagePolicy::kError;
  Normalize normalize;
  int resize() const { return resize_size > 0 ? resize_size : image_size * 8 / 7; }
};

class ImageFolderDataset : public Dataset {
 public:
  /// root: a folder of class folders. classes: the names to label by (a validation split gets
  /// the training split's); empty: root's own class folders. UsageError naming the folder or
  /// file for: no class folders, a class folder without images, an image format that is
  /// neither JPEG nor PNG, a class not among `classes`.
  explicit ImageFolderDataset(const std::string& root, ImageFolderOptions opts = {},
                              std::vector<std::string> classes = {});
  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  Example get(int64_t index) const override;
  DatasetShape shape() const override;
  void set_epoch(int64_t epoch) override { epoch_.store(epoch); }
  std::vector<std::string> take_skipped() const override;

  const std::vector<std::string>& classes() const { return classes_; }
  std::string file(int64_t index) const;  // its path
  int64_t label(int64_t index) const { return labels_[static_cast<size_t>(index)]; }
  /// Sample `index` transformed for `epoch`: (3, S, S) float. ImageError when it does not decode.
  at::Tensor image(int64_t index, int64_t epoch) const;

 private:
  void scan_class(const std::string& dir, int label);
  std::string root_;
  ImageFolderOptions opts_;
  std::vector<std::string> classes_;
  std::string names_;         // the files' paths under root_, back to back
  std::vector<size_t> ends_;  // where each file's path ends in names_
  std::vector<int32_t> labels_;
  std::atomic<int64_t> epoch_{0};
  mutable std::mutex bad_mu_;
  mutable std::set<int64_t> bad_;              // files found not to decode
  mutable std::vector<std::string> reported_;  // "path: reason", not yet taken
};

}  // namespace ddptrain
