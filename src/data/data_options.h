// DataOptions: what a run's data is (dataset, files, sizes of the generated ones), the data
// layer's own options; TrainConfig holds one (config/train_config.h), library users fill their
// own. How it is batched is LoaderOptions (data/loader_options.h).
#pragma once

#include <string>

#include "util/choices.h"

namespace ddptrain {

// The datasets `ddptrain train` reads, and their words (Note [Choices are enums], util/choices.h).
enum class DatasetKind {
  kSynthetic,
  kFashionMnist,
  kMnist,
  kCifar10,
  kTensors,
  kTokens,
  kText,
  kTokenShards,
  kImageFolder,
  kWebDataset
};

inline const Choices<DatasetKind>& dataset_choices() {
  static const Choices<DatasetKind> c{{"synthetic", DatasetKind::kSynthetic},
                                      {"fashion-mnist", DatasetKind::kFashionMnist},
                                      {"mnist", DatasetKind::kMnist},
                                      {"cifar10", DatasetKind::kCifar10},
                                      {"tensors", DatasetKind::kTensors},
                                      {"tokens", DatasetKind::kTokens},
                                      {"text", DatasetKind::kText},
                                      {"token_shards", DatasetKind::kTokenShards},
                                      {"image_folder", DatasetKind::kImageFolder},
                                      {"webdataset", DatasetKind::kWebDataset}};
  return c;
}
inline const char* word(DatasetKind v) { return dataset_choices().word(v); }

/// Token sequences (for gpt), not images.
inline bool is_token_dataset(DatasetKind d) {
  return d == DatasetKind::kTokens || d == DatasetKind::kText || d == DatasetKind::kTokenShards;
}

/// Read from the files that data_path names (a text file, token shards, tar shards).
inline bool reads_path(DatasetKind d) {
  return d == DatasetKind::kText || d == DatasetKind::kTokenShards || d == DatasetKind::kWebDataset;
}

/// Shards that data_path and val_path name (a glob each): the training and validation splits.
inline bool reads_shards(DatasetKind d) {
  return d == DatasetKind::kTokenShards || d == DatasetKind::kWebDataset;
}

/// Read from the files of a folder (data_dir), not generated or one text file.
inline bool reads_folder(DatasetKind d) {
  return d == DatasetKind::kFashionMnist || d == DatasetKind::kMnist || d == DatasetKind::kCifar10 ||
         d == DatasetKind::kTensors || d == DatasetKind::kImageFolder;
}

/// Image files decoded as they are read (image_folder, webdataset): sized by image_size, not by the data.
inline bool decodes_images(DatasetKind d) {
  return d == DatasetKind::kImageFolder || d == DatasetKind::kWebDataset;
}

// What an image that does not decode does (image_folder, webdataset): stop the run naming it, or train on
// the next readable image in its place and report it once.
enum class BadImagePolicy { kError, kSkip };

inline const Choices<BadImagePolicy>& bad_image_choices() {
  static const Choices<BadImagePolicy> c{{"error", BadImagePolicy::kError}, {"skip", BadImagePolicy::kSkip}};
  return c;
}
inline const char* word(BadImagePolicy v) { return bad_image_choices().word(v); }

struct DataOptions {
  DatasetKind dataset = DatasetKind::kSynthetic;
  std::string data_dir;   // empty: the dataset's default (fashion-mnist only; see datasets.h)
  std::string data_path;  // text: the text file; token_shards, webdataset: the training shards (a glob)
  std::string
      val_path;  // token_shards, webdataset: the validation shards (a glob); empty: no validation split
  int num_classes = 10;
  int in_channels = 3;
  int image_size =
      0;  // synthetic: 32; image_folder, webdataset: 224; 0 = the dataset's (image_size_or_default)
  int resize_size = 0;  // the image datasets' evaluation Resize (shorter side); 0: floor(image_size·8/7)
  bool jpeg_dct_scaling = true;  // image datasets: decode a JPEG at a reduced DCT scale where the crop allows
  BadImagePolicy bad_images = BadImagePolicy::kError;  // image datasets: an image that does not decode
  long long dataset_size = 50000;                      // synthetic and tokens only
  bool augment =
      false;  // random crop (and flip for cifar10; RandomResizedCrop + flip for the image datasets)

  /// The image size the dataset makes: image_size, else the dataset's default.
  int image_size_or_default() const {
    return image_size > 0 ? image_size : decodes_images(dataset) ? 224 : 32;
  }

  /// OptionError naming the field, its value and the fix (Note [Options named by their
  /// field]): sizes that are not positive, augment without a recipe for the dataset, text,
  /// token_shards or webdataset without its files, and a field this dataset has no use for set anyway (it
  /// would be silently ignored). make_datasets calls it.
  void validate() const;
};

}  // namespace ddptrain
