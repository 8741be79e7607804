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
//  - A sample is one file, read whole; decoding, transforms and a file that does not decode
//    are ImageDataset's (data/image_dataset.h).
#pragma once

#include <string>
#include <vector>

#include "data/image_dataset.h"

namespace ddptrain {

class ImageFolderDataset : public ImageDataset {
 public:
  /// root: a folder of class folders. classes: the names to label by (a validation split gets
  /// the training split's); empty: root's own class folders. UsageError naming the folder or
  /// file for: no class folders, a class folder without images, an image format that is
  /// neither JPEG nor PNG, a class not among `classes`.
  explicit ImageFolderDataset(const std::string& root, ImageOptions opts = {},
                              std::vector<std::string> classes = {});
  const std::vector<std::string>& classes() const { return classes_; }
  /// FNV-1a 64 of the class names in label order: another copy's folders named otherwise
  /// label the same images with other classes (the run identity and the ranks compare it).
  uint64_t label_names_hash() const override;
  std::vector<std::string> label_names() const override { return classes_; }
  /// The files' paths under the root (each class folder's name first), in order.
  uint64_t files_hash() const override;
  std::string file(int64_t index) const;  // its path
  std::string name(int64_t index) const override { return file(index); }

 protected:
  std::vector<uint8_t> bytes(int64_t index) const override;
  int num_classes() const override { return static_cast<int>(classes_.size()); }

 private:
  void scan_class(const std::string& dir, int label);
  std::string root_;
  std::vector<std::string> classes_;
  std::string names_;         // the files' paths under root_, back to back
  std::vector<size_t> ends_;  // where each file's path ends in names_
};

}  // namespace ddptrain
