// Datasets behind one small interface: size() and get(i) -> (image, label).
// get() is const and thread-safe: loader threads call it concurrently.
//  - SyntheticDataset: the reference pipeline's: sample i is randn(C,H,W) from a CPU
//    generator seeded with i, then its label is randint(0, num_classes) from the same
//    generator — the same values as Python for the same i, on any rank, in any order.
//  - IdxDataset: Fashion-MNIST / MNIST from the (gzipped) IDX files, held in memory as
//    uint8; pixels / 255, then normalised with the dataset's mean and std.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

namespace ddptrain {

// One sample: an image (C, H, W) float32 and its class as a 0-dim int64 tensor, or a token
// window (T) int64 and the next tokens (T) int64 (data/token_datasets.h).
struct Example {
  at::Tensor input;
  at::Tensor target;
};

struct DatasetShape {
  int channels = 3;
  int height = 32;
  int width = 32;
  int num_classes = 10;  // token datasets: the vocabulary size
  int block_size = 0;    // token datasets: tokens per sample; 0 for images
  /// Each sample's target is num_classes float values (regression, --loss mse), or a class
  /// index; nothing: not said (a user's dataset), and not recorded then (TrainingSplit).
  std::optional<bool> float_targets = std::nullopt;
  bool is_tokens() const { return block_size > 0; }
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
  /// What the data is (built-in models are sized from it); a user's dataset may keep the default.
  virtual DatasetShape shape() const { return {}; }
  /// Called between epochs (no loader thread runs then): datasets whose samples depend on
  /// the epoch (augmentation) take it here.
  virtual void set_epoch(int64_t /*epoch*/) {}
  /// The samples this dataset could not read and replaced since the last call ("file:
  /// reason": the Trainer counts a file once by what comes before the first ": "; image_folder
  /// with bad_images=skip), each once. Called between epochs.
  virtual std::vector<std::string> take_skipped() const { return {}; }
  /// A hash of what the labels name (0: nothing beyond their numbers), such as an image
  /// folder's class names in label order: the ranks compare it (Note [Every rank holds the same
  /// data]) and a run's identity holds it, so a copy that names its classes otherwise (the same
  /// images, other labels) is refused. A user's dataset whose labels come from a mapping that
  /// can change may return a hash of that mapping.
  virtual uint64_t label_names_hash() const { return 0; }
  /// The class names in label order where the data names its classes (an image folder's
  /// folders), else empty: a checkpoint records them, so that an evaluation labels a
  /// validation split by them without the training split (TrainingSplit).
  virtual std::vector<std::string> label_names() const { return {}; }
  /// A hash of which samples the indices name, in order (0: not known), such as a shard set's
  /// file names and sizes: a checkpoint's epoch order is drawn over indices, so a mid-epoch
  /// resume over other files of the same count would repeat some samples and skip others
  /// (Note [Resume at another world size]); the ranks compare it too (Note [Every rank holds
  /// the same data]). Names, not paths: the data may move between runs. Called a few times a
  /// run, from the thread that calls fit(): keep it cheap, or compute it once.
  virtual uint64_t files_hash() const { return 0; }
};

class SyntheticDataset : public Dataset {
 public:
  SyntheticDataset(int64_t size, DatasetShape shape) : size_(size), shape_(shape) {}
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;
  DatasetShape shape() const override { return shape_; }

 private:
  int64_t size_;
  DatasetShape shape_;
};

class IdxDataset : public Dataset {
 public:
  /// Reads `<prefix>-images-idx3-ubyte[.gz]` and `<prefix>-labels-idx1-ubyte[.gz]` in dir;
  /// UsageError naming the file when one is missing or malformed.
  /// `name` is the dataset's, for messages.
  IdxDataset(const std::string& dir, const std::string& prefix, double mean, double std,
             const std::string& name);
  int64_t size() const override { return labels_.size(0); }
  Example get(int64_t index) const override;
  DatasetShape shape() const override;
  /// UsageError unless every label of this split is a class of `train` (the first label
  /// outside is named with its index): checked at load, not at the first evaluation.
  void check_scores(const IdxDataset& train) const;
  /// The same against a training split of `classes` classes, `train_name` in the message.
  void check_scores(int classes, const std::string& train_name) const;

 private:
  std::string labels_path_;
  at::Tensor images_;  // (N, H, W) uint8
  at::Tensor labels_;  // (N) int64
  double mean_, std_;
};

/// CIFAR-10's binary version: `data_batch_1..5.bin` (train) or `test_batch.bin` in dir;
/// each record is 1 label byte then 3x32x32 pixel bytes (R, G, B planes). UsageError naming
/// the file when one is missing, not a whole number of records, or has a label >= 10.
class Cifar10Dataset : public Dataset {
 public:
  Cifar10Dataset(const std::string& dir, bool train);
  int64_t size() const override { return labels_.size(0); }
  Example get(int64_t index) const override;
  DatasetShape shape() const override { return {3, 32, 32, 10}; }

 private:
  at::Tensor images_;  // (N, 3, 32, 32) uint8
  at::Tensor labels_;  // (N) int64
};

/// Users' own data: `<dir>/train.pt` and (optionally) `<dir>/test.pt`, each written by
/// torch.save({"images": x, "labels": y}, path) with x of shape (N, C, H, W), uint8 (scaled
/// by 1/255) or float32 (used as is), and y int64 class indices in [0, classes) of shape (N),
/// or float targets (for --loss mse) of shape (N, ...), float64 read as float32; shape()'s
/// num_classes is then the size of one target (1 for (N)). Read by our restricted reader
/// (nothing in the file is executed).
class TensorFileDataset : public Dataset {
 public:
  explicit TensorFileDataset(const std::string& path);
  int64_t size() const override { return labels_.size(0); }
  Example get(int64_t index) const override;
  DatasetShape shape() const override { return shape_; }
  /// The labels (every one: a few bytes a sample) and the images' shape.
  uint64_t files_hash() const override;
  /// UsageError unless this split can score a model trained on `train`: images of its shape,
  /// targets of its kind and size, and class labels among its classes (the first label
  /// outside is named with its index). Checked at load: otherwise the first evaluation, an
  /// epoch later, fails in the loss, or (another image size under global pooling) passes
  /// with a meaningless accuracy.
  void check_scores(const TensorFileDataset& train) const;
  /// The same against a training split of shape `train` (recorded), `train_name` in the message;
  /// the targets' kind where it says one (a record before it was kept, or of a user's dataset: none).
  void check_scores(const DatasetShape& train, const std::string& train_name) const;

 private:
  std::string path_;
  at::Tensor images_;
  at::Tensor labels_;
  DatasetShape shape_;
};

struct DataSplits {
  std::unique_ptr<Dataset> train;  // null where make_datasets was given the TrainingSplit
  std::unique_ptr<Dataset> test;   // null when the dataset has no test split
};

/// What a checkpoint records of the split it trained on (meta.json's "training_split"), so that
/// an evaluation opens the test split alone (a machine with only the validation files): the
/// shape its model was built from, and the class names its labels index (an image folder's).
struct TrainingSplit {
  DatasetShape shape;
  std::vector<std::string> label_names;
};

/// What token datasets need from the model: its context length and vocabulary.
struct TokenSpec {
  int block_size = 0;
  int vocab_size = 0;
};

struct DataOptions;
/// Builds the train (and test) split named by the options; token datasets (tokens, text)
/// cut windows of tokens.block_size (the text dataset's test split is its validation split).
/// With opts.augment the train split is augmented (data/augment.h) with this seed.
/// Fashion-MNIST's files as Debian's dataset-fashion-mnist installs them: its --data_dir
/// default. No other dataset has one.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

/// Given `trained`, the test split alone: checked against the training split as recorded (its
/// classes, its images' shape), the training split's files never opened (DataSplits::train null).
DataSplits make_datasets(const DataOptions& opts, const TokenSpec& tokens = {}, uint64_t seed = 0,
                         const TrainingSplit* trained = nullptr);

/// Reads a whole file, gunzipping when it ends in .gz; UsageError when missing.
std::string read_maybe_gzipped(const std::string& path);

}  // namespace ddptrain
