// The image folder's splits (--dataset image_folder): DIR/train and, where there is one,
// DIR/val, labelled by train's classes (a validation split's class folder that train lacks is an
// error, not a shifted label). A val/ that is train/ under another name is refused.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/image_folder.h"

namespace ddptrain {

struct ImageFolderSplits {
  std::unique_ptr<ImageFolderDataset> train;  // null where the training split's names were given
  std::unique_ptr<ImageFolderDataset> val;    // null where DIR has no val/
};

/// io: the training split's options (val/ takes no random crop). trained_names: the class
/// names a checkpoint recorded of its training split (an evaluation of val/ alone: train/ is not
/// opened); null: train/'s own classes. UsageError naming the folder where DIR has no train/
/// (and no names were given), or val/ and train/ are the same images.
ImageFolderSplits image_folder_splits(const std::string& dir, ImageOptions io,
                                      const std::vector<std::string>* trained_names);

}  // namespace ddptrain
