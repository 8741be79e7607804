#include "data/datasets.h"

#include <ATen/CPUGeneratorImpl.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/augment.h"
#include "data/data_options.h"
#include "data/image_folder_splits.h"
#include "data/token_datasets.h"
#include "data/webdataset.h"
#include "serialize/state_dict_reader.h"
#include "util/error.h"
#include "util/files.h"
#include "util/fnv.h"

namespace ddptrain {

Example SyntheticDataset::get(int64_t index) const {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(index));
  Example e;
  e.input = at::randn({shape_.channels, shape_.height, shape_.width}, gen);
  e.target = at::scalar_tensor(at::randint(0, shape_.num_classes, {1}, gen).item<int64_t>(), at::kLong);
  return e;
}

std::string read_maybe_gzipped(const std::string& path) {
  DDP_USAGE_CHECK(std::filesystem::is_regular_file(path), "data file '", path, "' does not exist");
  if (path.size() < 3 || path.substr(path.size() - 3) != ".gz") {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream os;
    os << in.rdbuf();
    return os.str();
  }
  gzFile f = gzopen(path.c_str(), "rb");
  DDP_USAGE_CHECK(f != nullptr, "cannot open '", path, "'");
  std::string out;
  char buf[1 << 16];
  int n = 0;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  int err = 0;
  const char* msg = gzerror(f, &err);
  gzclose(f);
  DDP_USAGE_CHECK(n == 0 && err == Z_OK, "'", path, "' is not a valid gzip file (", msg,
                  "); re-download or reinstall the dataset");
  return out;
}

namespace {

uint32_t be32(const std::string& b, size_t off) {
  auto u = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(b[off + i])); };
  return (u(0) << 24) | (u(1) << 16) | (u(2) << 8) | u(3);
}

std::string find_idx_file(const std::string& dir, const std::string& name, const std::string& dataset) {
  std::string plain = dir + "/" + name;
  if (std::filesystem::is_regular_file(plain + ".gz")) return plain + ".gz";
  if (std::filesystem::is_regular_file(plain)) return plain;
  throw UsageError(
      detail::concat("folder '", dir, "' has no ", name, "(.gz): it is not ", dataset, "'s IDX files"));
}

constexpr const char* kDatasetsOwner = "DataOptions";

// Where a dataset's files are: data_dir, else the dataset's own default. Only Fashion-MNIST
// has one (Debian's dataset-fashion-mnist package); the others need data_dir.
std::string data_dir_for(const DataOptions& o) {
  if (!o.data_dir.empty()) return o.data_dir;
  const std::vector<OptionField> fields{{&o.dataset, "dataset"}, {&o.data_dir, "data_dir"}};
  if (o.dataset == DatasetKind::kFashionMnist) {
    if (!std::filesystem::is_directory(kFashionMnistDir))
      throw OptionError(fields,
                        str("{0:fashion-mnist} reads ", kFashionMnistDir,
                            " unless {1} is given, and it does not exist: apt install "
                            "dataset-fashion-mnist, or set {1:DIR} with Fashion-MNIST's IDX files"),
                        kDatasetsOwner)
          .within(&o);
    return kFashionMnistDir;
  }
  const char* files =
      o.dataset == DatasetKind::kMnist     ? "MNIST's IDX files (train-images-idx3-ubyte[.gz] and the like)"
      : o.dataset == DatasetKind::kCifar10 ? "CIFAR-10's binary version (the cifar-10-batches-bin folder)"
      : o.dataset == DatasetKind::kImageFolder
          ? "train/<class>/<image> (and val/<class>/<image>, if there is one: ImageNet's layout)"
          : "train.pt (and test.pt, if there is one)";
  throw OptionError(fields,
                    str("{0:", word(o.dataset), "} reads ", files,
                        " from {1}, which has no default for it (only Fashion-MNIST has a Debian package): "
                        "set {1:DIR}"),
                    kDatasetsOwner)
      .within(&o);
}

// A dataset's own error about its files (which it names), as an error of the field that named
// them (Note [Options named by their field]): "--data_dir: folder '/x' has no ...".
template <typename Make>
auto read_from(const std::string* field, const char* name, const DataOptions& o, Make make) {
  try {
    return make();
  } catch (const OptionError&) {
    throw;
  } catch (const UsageError& e) {
    throw OptionError({{field, name}}, "{0}: " + OptionError::literal(e.what()), kDatasetsOwner).within(&o);
  }
}

// A validation split that shares a file with the training split scores the model on samples
// it trains on, and its loss reads better than the model is: refused (a pattern such as
// 'data/*.bin' takes nanoGPT's val.bin too). Called once both splits have opened their files.
// `train_may_be_absent`: the training split was not opened (an evaluation of the test split
// alone), and a data_path that matches no file here is no error.
void refuse_files_in_both_splits(const DataOptions& o, const char* kind, bool train_may_be_absent = false) {
  if (o.val_path.empty()) return;
  std::vector<std::string> train;
  try {
    train = files_matching(o.data_path, kind, "");
  } catch (const UsageError&) {
    if (train_may_be_absent) return;
    throw;
  }
  const std::string both = first_file_in_both(train, files_matching(o.val_path, kind, ""));
  if (both.empty()) return;
  throw OptionError({{&o.val_path, "val_path"}, {&o.data_path, "data_path"}},
                    str("{0}='", OptionError::literal(o.val_path), "' and {1}='",
                        OptionError::literal(o.data_path), "' both name '", OptionError::literal(both),
                        "': the validation split would score the model on samples it trains on; give {0} "
                        "files that {1} does not match"),
                    kDatasetsOwner)
      .within(&o);
}

// The image datasets' options: the training split's (the validation split's takes no random crop).
ImageOptions image_options(const DataOptions& o, uint64_t seed) {
  ImageOptions io;
  io.image_size = o.image_size_or_default();
  io.resize_size = o.resize_size;
  io.jpeg_dct_scaling = o.jpeg_dct_scaling;
  io.bad_images = o.bad_images;
  io.seed = seed;
  io.random_crop = o.augment;
  return io;
}

// UsageError naming the first of a test split's labels (int64 class indices) that is not a class
// of the training split (0..classes-1): checked at load, not at the first evaluation, an epoch
// later.
void check_labels_are_classes(const at::Tensor& labels, int64_t classes, const std::string& path,
                              const std::string& train_name) {
  const at::Tensor outside = (labels >= classes).nonzero();
  if (outside.numel() == 0) return;
  const int64_t i = outside[0][0].item<int64_t>();
  throw UsageError(str("'", path, "': label ", labels.data_ptr<int64_t>()[i], " at index ", i,
                       " is not a class of the training split (", train_name, " has classes 0..", classes - 1,
                       "; ", outside.size(0), " of ", labels.size(0),
                       " test labels are outside): relabel the test split or add the class to the training "
                       "split"));
}

}  // namespace

IdxDataset::IdxDataset(const std::string& dir, const std::string& prefix, double mean, double std,
                       const std::string& name)
    : mean_(mean), std_(std) {
  std::string ipath = find_idx_file(dir, prefix + "-images-idx3-ubyte", name);
  std::string ib = read_maybe_gzipped(ipath);
  DDP_USAGE_CHECK(ib.size() >= 16 && be32(ib, 0) == 2051, "'", ipath,
                  "' is not an IDX image file (magic 2051 expected)");
  const int64_t n = be32(ib, 4), h = be32(ib, 8), w = be32(ib, 12);
  // Each factor below 2^32, the product checked by division (n * h * w may not fit 64 bits).
  const auto pixels = static_cast<int64_t>(ib.size()) - 16;
  DDP_USAGE_CHECK(
      h > 0 && w > 0 && h <= 65536 && w <= 65536 && pixels % (h * w) == 0 && pixels / (h * w) == n, "'",
      ipath, "' is truncated or malformed: ", ib.size(), " bytes for ", n, " images of ", h, "x", w);
  std::string lpath = find_idx_file(dir, prefix + "-labels-idx1-ubyte", name);
  std::string lb = read_maybe_gzipped(lpath);
  DDP_USAGE_CHECK(lb.size() >= 8 && be32(lb, 0) == 2049, "'", lpath,
                  "' is not an IDX label file (magic 2049 expected)");
  DDP_USAGE_CHECK(be32(lb, 4) == n && static_cast<int64_t>(lb.size()) == 8 + n, "'", lpath,
                  "' does not hold ", n, " labels matching ", ipath);
  images_ = at::empty({n, h, w}, at::kByte);
  std::memcpy(images_.data_ptr(), ib.data() + 16, static_cast<size_t>(n * h * w));
  auto lab8 = at::empty({n}, at::kByte);
  std::memcpy(lab8.data_ptr(), lb.data() + 8, static_cast<size_t>(n));
  labels_ = lab8.to(at::kLong);
  labels_path_ = lpath;
  // Labels past 9 make more classes than MNIST's ten; a label byte corrupted to 255 would
  // silently build a 256-class head. So every class past 9 up to the largest label must have
  // samples (a dataset of that many classes has each).
  if (n == 0) return;
  const at::Tensor counts = at::bincount(labels_);
  const int64_t classes = counts.numel();
  for (int64_t c = 10; c < classes; ++c) {
    if (counts.data_ptr<int64_t>()[c] > 0) continue;
    const int64_t at = (labels_ == classes - 1).nonzero()[0][0].item<int64_t>();
    throw UsageError(str("'", lpath, "': label ", classes - 1, " at index ", at, " makes ", classes,
                         " classes, but class ", c, " has no sample: ", name,
                         "'s labels are the classes 0..9 (a damaged label file?)"));
  }
}

void IdxDataset::check_scores(const IdxDataset& train) const {
  check_scores(train.shape().num_classes, "'" + train.labels_path_ + "'");
}

void IdxDataset::check_scores(int classes, const std::string& train_name) const {
  check_labels_are_classes(labels_, classes, labels_path_, train_name);
}

DatasetShape IdxDataset::shape() const {
  int64_t max_label = labels_.numel() ? labels_.max().item<int64_t>() : 0;
  return {1, static_cast<int>(images_.size(1)), static_cast<int>(images_.size(2)),
          static_cast<int>(std::max<int64_t>(10, max_label + 1))};
}

Example IdxDataset::get(int64_t index) const {
  Example e;
  e.input = images_[index].to(at::kFloat).div_(255.0).sub_(mean_).div_(std_).unsqueeze(0);
  e.target = at::scalar_tensor(labels_.data_ptr<int64_t>()[index], at::kLong);
  return e;
}

Cifar10Dataset::Cifar10Dataset(const std::string& dir, bool train) {
  std::vector<std::string> files;
  if (train)
    for (int i = 1; i <= 5; ++i) files.push_back(dir + "/data_batch_" + std::to_string(i) + ".bin");
  else
    files.push_back(dir + "/test_batch.bin");
  constexpr int64_t kRecord = 1 + 3 * 32 * 32;
  std::string all;
  for (const auto& f : files) {
    DDP_USAGE_CHECK(std::filesystem::is_regular_file(f), "folder '", dir, "' has no ", f,
                    ": it is not CIFAR-10's binary version (cifar-10-batches-bin)");
    std::string b = read_maybe_gzipped(f);
    DDP_USAGE_CHECK(!b.empty() && b.size() % kRecord == 0, "'", f,
                    "' is not CIFAR-10 binary data: ", b.size(), " bytes is not a whole number of ", kRecord,
                    "-byte records (truncated?)");
    all += b;
  }
  const int64_t n = static_cast<int64_t>(all.size()) / kRecord;
  images_ = at::empty({n, 3, 32, 32}, at::kByte);
  labels_ = at::empty({n}, at::kLong);
  auto* img = images_.data_ptr<uint8_t>();
  auto* lab = labels_.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const auto label = static_cast<unsigned char>(all[static_cast<size_t>(i * kRecord)]);
    DDP_USAGE_CHECK(label < 10, "CIFAR-10 record ", i, " in folder '", dir, "' has label ", int{label},
                    " (must be < 10): not CIFAR-10 binary data");
    lab[i] = label;
    std::memcpy(img + i * (kRecord - 1), all.data() + i * kRecord + 1, static_cast<size_t>(kRecord - 1));
  }
}

Example Cifar10Dataset::get(int64_t index) const {
  static const float kMean[3] = {0.4914f, 0.4822f, 0.4465f}, kStd[3] = {0.2470f, 0.2435f, 0.2616f};
  Example e;
  e.input = images_[index].to(at::kFloat).div_(255.0);
  for (int c = 0; c < 3; ++c) e.input[c].sub_(kMean[c]).div_(kStd[c]);
  e.target = at::scalar_tensor(labels_.data_ptr<int64_t>()[index], at::kLong);
  return e;
}

TensorFileDataset::TensorFileDataset(const std::string& path) : path_(path) {
  DDP_USAGE_CHECK(std::filesystem::is_regular_file(path), "tensor dataset file '", path,
                  "' does not exist; write it with torch.save({\"images\": x, \"labels\": y}, path)");
  NamedTensors t;
  try {
    t = unpickle_tensors(
        read_maybe_gzipped(path), path,
        "a dict {\"images\": (N, C, H, W) tensor, \"labels\": (N) int64 tensor}; write it with "
        "torch.save({\"images\": x, \"labels\": y}, path)");
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  for (const auto& [k, v] : t) {
    if (k == "images") images_ = v.contiguous();
    if (k == "labels") labels_ = v.contiguous();
  }
  DDP_USAGE_CHECK(images_.defined() && labels_.defined(), "'", path,
                  "' must hold {\"images\": (N, C, H, W) tensor, \"labels\": (N) int64 tensor}");
  DDP_USAGE_CHECK(images_.dim() == 4, "'", path, "': images has shape ", images_.sizes(),
                  "; expected (N, C, H, W)");
  DDP_USAGE_CHECK(images_.scalar_type() == at::kByte || images_.scalar_type() == at::kFloat, "'", path,
                  "': images must be uint8 or float32, not ", images_.scalar_type());
  DDP_USAGE_CHECK(labels_.dim() >= 1 && labels_.size(0) == images_.size(0), "'", path, "': labels has shape ",
                  labels_.sizes(), "; expected (", images_.size(0), ") class indices or (", images_.size(0),
                  ", ...) float targets: one per image");
  if (labels_.is_floating_point()) {  // regression targets (--loss mse)
    labels_ = labels_.to(at::kFloat);
    const int64_t per_sample = labels_.numel() / std::max<int64_t>(1, labels_.size(0));
    shape_ = {static_cast<int>(images_.size(1)), static_cast<int>(images_.size(2)),
              static_cast<int>(images_.size(3)), static_cast<int>(per_sample)};
    shape_.float_targets = true;
    return;
  }
  DDP_USAGE_CHECK(labels_.dim() == 1 && labels_.scalar_type() == at::kLong, "'", path,
                  "': labels must be int64 class indices of shape (", images_.size(0),
                  ") or float targets, not ", labels_.scalar_type(), " ", labels_.sizes());
  DDP_USAGE_CHECK(labels_.numel() > 0 && labels_.min().item<int64_t>() >= 0, "'", path,
                  "': labels must be class indices >= 0");
  shape_ = {static_cast<int>(images_.size(1)), static_cast<int>(images_.size(2)),
            static_cast<int>(images_.size(3)), static_cast<int>(labels_.max().item<int64_t>() + 1)};
  shape_.float_targets = false;
}

void TensorFileDataset::check_scores(const TensorFileDataset& train) const {
  check_scores(train.shape_, "'" + train.path_ + "'");
}

void TensorFileDataset::check_scores(const DatasetShape& t, const std::string& train_name) const {
  const auto kind = [](bool floats) { return floats ? "float targets" : "class indices"; };
  const bool floats = labels_.is_floating_point();
  DDP_USAGE_CHECK(!t.float_targets || *t.float_targets == floats, "'", path_, "': labels are ", kind(floats),
                  " but ", train_name, " has ", kind(t.float_targets.value_or(false)),
                  ": both splits need the same kind of labels");
  DDP_USAGE_CHECK(shape_.channels == t.channels && shape_.height == t.height && shape_.width == t.width, "'",
                  path_, "': images of shape (", shape_.channels, ", ", shape_.height, ", ", shape_.width,
                  ") but ", train_name, " trains on (", t.channels, ", ", t.height, ", ", t.width,
                  "): the test split must hold images of the training split's shape");
  if (labels_.is_floating_point()) {
    DDP_USAGE_CHECK(shape_.num_classes == t.num_classes, "'", path_, "': ", shape_.num_classes,
                    " targets per image but ", train_name, " has ", t.num_classes,
                    ": both splits need targets of the same size");
    return;
  }
  check_labels_are_classes(labels_, t.num_classes, path_, train_name);
}

uint64_t TensorFileDataset::files_hash() const {
  const at::Tensor labels = labels_.contiguous();
  uint64_t h = fnv1a(labels.data_ptr(), static_cast<size_t>(labels.nbytes()));
  for (const int64_t d : images_.sizes()) h = fnv1a(std::to_string(d) + ' ', h);
  return h;
}

Example TensorFileDataset::get(int64_t index) const {
  Example e;
  e.input =
      images_.scalar_type() == at::kByte ? images_[index].to(at::kFloat).div_(255.0) : images_[index].clone();
  e.target = labels_.is_floating_point() ? labels_[index].clone()
                                         : at::scalar_tensor(labels_.data_ptr<int64_t>()[index], at::kLong);
  return e;
}

DataSplits make_datasets(const DataOptions& opts, const TokenSpec& tokens, uint64_t seed,
                         const TrainingSplit* trained) {
  opts.validate();
  // An image folder labels its val/ by the training split's class names: without them, that split.
  if (trained && opts.dataset == DatasetKind::kImageFolder && trained->label_names.empty()) trained = nullptr;
  DataSplits s;
  // Only the datasets read from files have a folder (resolved once: it checks the disk).
  const std::string dir = reads_folder(opts.dataset) ? data_dir_for(opts) : "";
  const auto from_dir = [&](auto make) { return read_from(&opts.data_dir, "data_dir", opts, make); };
  const std::string recorded = "the checkpoint's training split";
  switch (opts.dataset) {
    case DatasetKind::kSynthetic: {  // no test split
      if (trained) break;
      const int size = opts.image_size_or_default();
      s.train = std::make_unique<SyntheticDataset>(
          opts.dataset_size, DatasetShape{opts.in_channels, size, size, opts.num_classes});
      break;
    }
    case DatasetKind::kImageFolder:
      from_dir([&] {
        ImageFolderSplits f =
            image_folder_splits(dir, image_options(opts, seed), trained ? &trained->label_names : nullptr);
        s.train = std::move(f.train);
        s.test = std::move(f.val);
        return 0;
      });
      break;
    case DatasetKind::kWebDataset: {
      ImageOptions io = image_options(opts, seed);
      const auto shards = [&](const std::string* field, const char* name, int classes) {
        return read_from(field, name, opts,
                         [&] { return std::make_unique<WebDatasetDataset>(*field, io, classes); });
      };
      std::unique_ptr<Dataset> train;
      if (!trained) train = shards(&opts.data_path, "data_path", 0);
      io.random_crop = false;
      const int classes = trained ? trained->shape.num_classes : train->shape().num_classes;
      if (!opts.val_path.empty()) s.test = shards(&opts.val_path, "val_path", classes);
      s.train = std::move(train);
      refuse_files_in_both_splits(opts, "tar shard", trained != nullptr);
      break;
    }
    case DatasetKind::kFashionMnist:
    case DatasetKind::kMnist: {
      const bool fashion = opts.dataset == DatasetKind::kFashionMnist;
      const double mean = fashion ? 0.2860 : 0.1307, std = fashion ? 0.3530 : 0.3081;
      const char* name = fashion ? "Fashion-MNIST" : "MNIST";
      std::unique_ptr<IdxDataset> train;
      if (!trained)
        train = from_dir([&] { return std::make_unique<IdxDataset>(dir, "train", mean, std, name); });
      s.test = from_dir([&] {
        auto test = std::make_unique<IdxDataset>(dir, "t10k", mean, std, name);
        if (train)
          test->check_scores(*train);
        else
          test->check_scores(trained->shape.num_classes, recorded);
        return test;
      });
      s.train = std::move(train);
      break;
    }
    case DatasetKind::kCifar10:
      if (!trained) s.train = from_dir([&] { return std::make_unique<Cifar10Dataset>(dir, true); });
      s.test = from_dir([&] { return std::make_unique<Cifar10Dataset>(dir, false); });
      break;
    case DatasetKind::kTensors:
      from_dir([&] {
        std::unique_ptr<TensorFileDataset> train;
        if (!trained) train = std::make_unique<TensorFileDataset>(dir + "/train.pt");
        if (std::filesystem::is_regular_file(dir + "/test.pt")) {
          auto test = std::make_unique<TensorFileDataset>(dir + "/test.pt");
          if (train)
            test->check_scores(*train);
          else
            test->check_scores(trained->shape, recorded);
          s.test = std::move(test);
        }
        s.train = std::move(train);
        return 0;
      });
      break;
    case DatasetKind::kTokens:
    case DatasetKind::kText:
    case DatasetKind::kTokenShards:
      if (tokens.block_size <= 0)
        throw OptionError(
            {{&opts.dataset, "dataset"}},
            str("{0}=", word(opts.dataset),
                " holds token sequences: train it with a GPT or Llama model (TokenSpec::block_size > 0)"),
            kDatasetsOwner)
            .within(&opts);
      if (opts.dataset == DatasetKind::kTokens) {  // no test split
        if (!trained)
          s.train = std::make_unique<TokenSyntheticDataset>(opts.dataset_size, tokens.block_size,
                                                            tokens.vocab_size);
      } else if (opts.dataset == DatasetKind::kTokenShards) {
        const auto shards = [&](const std::string* field, const char* name) {
          return read_from(field, name, opts, [&] {
            return std::make_unique<TokenShardDataset>(*field, tokens.block_size, tokens.vocab_size);
          });
        };
        if (!trained) s.train = shards(&opts.data_path, "data_path");
        if (!opts.val_path.empty()) s.test = shards(&opts.val_path, "val_path");
        refuse_files_in_both_splits(opts, "token file", trained != nullptr);
      } else {
        const auto from_file = [&](auto make) { return read_from(&opts.data_path, "data_path", opts, make); };
        if (!trained)
          s.train = from_file(
              [&] { return std::make_unique<TextDataset>(opts.data_path, tokens.block_size, true); });
        s.test = from_file(
            [&] { return std::make_unique<TextDataset>(opts.data_path, tokens.block_size, false); });
      }
      break;
  }
  if (trained && s.test && !trained->shape.is_tokens()) {  // the model was built for the recorded split
    const DatasetShape t = s.test->shape(), r = trained->shape;
    DDP_USAGE_CHECK(t.channels == r.channels && t.num_classes <= r.num_classes, "--dataset ",
                    word(opts.dataset), ": the test split's images have ", t.channels, " channels and ",
                    t.num_classes, " classes, but ", recorded, "'s had ", r.channels, " and ", r.num_classes,
                    ", which the model was built for: evaluate it on data of the kind it was trained on");
  }
  if (s.train && opts.augment && !decodes_images(opts.dataset))  // image datasets crop as they decode
    s.train = std::make_unique<AugmentedDataset>(std::move(s.train), augment_for(opts.dataset, seed));
  return s;
}

}  // namespace ddptrain
