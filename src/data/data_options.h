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
  kTokenShards
};

inline const Choices<DatasetKind>& dataset_choices() {
  static const Choices<DatasetKind> c{
      {"synthetic", DatasetKind::kSynthetic}, {"fashion-mnist", DatasetKind::kFashionMnist},
      {"mnist", DatasetKind::kMnist},         {"cifar10", DatasetKind::kCifar10},
      {"tensors", DatasetKind::kTensors},     {"tokens", DatasetKind::kTokens},
      {"text", DatasetKind::kText},           {"token_shards", DatasetKind::kTokenShards}};
  return c;
}
inline const char* word(DatasetKind v) { return dataset_choices().word(v); }

/// Token sequences (for gpt), not images.
inline bool is_token_dataset(DatasetKind d) {
  return d == DatasetKind::kTokens || d == DatasetKind::kText || d == DatasetKind::kTokenShards;
}

/// Read from the files that data_path names (a text file, or token shards).
inline bool reads_path(DatasetKind d) { return d == DatasetKind::kText || d == DatasetKind::kTokenShards; }

/// Read from the files of a folder (data_dir), not generated or one text file.
inline bool reads_folder(DatasetKind d) {
  return d == DatasetKind::kFashionMnist || d == DatasetKind::kMnist || d == DatasetKind::kCifar10 ||
         d == DatasetKind::kTensors;
}

struct DataOptions {
  DatasetKind dataset = DatasetKind::kSynthetic;
  std::string data_dir;   // empty: the dataset's default (fashion-mnist only; see datasets.h)
  std::string data_path;  // text: the text file; token_shards: the training shards (a glob)
  std::string val_path;   // token_shards: the validation shards (a glob); empty: no validation split
  int num_classes = 10;
  int in_channels = 3;
  int image_size = 32;
  long long dataset_size = 50000;  // synthetic and tokens only
  bool augment = false;            // random crop (and flip for cifar10) of training images

  /// OptionError naming the field, its value and the fix (Note [Options named by their
  /// field]): sizes that are not positive, augment without a recipe for the dataset, text
  /// or token_shards without its files, and a field this dataset has no use for set anyway (it would be
  /// silently ignored). make_datasets calls it.
  void validate() const;
};

}  // namespace ddptrain
