// Datasets and loader: synthetic samples equal Python's, IDX files are read and checked,
// and the loader's batches do not depend on the number of workers.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <thread>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <zlib.h>

#include "config/train_config.h"
#include "data/augment.h"
#include "data/datasets.h"
#include "data/loader.h"
#include "golden.h"
#include "serialize/python_pickle.h"
#include "util/error.h"
#include "util/thread_policy.h"

using namespace ddptrain;

TEST(Data, SyntheticEqualsPython) {
  auto lines = testing_golden::read_lines("synthetic.txt");
  ASSERT_EQ(lines.size(), 5u);
  SyntheticDataset ds(100000, {3, 32, 32, 10});
  for (const auto& line : lines) {
    std::istringstream in(line);
    int64_t i, label;
    std::vector<double> d(4);
    in >> i >> label >> d[0] >> d[1] >> d[2] >> d[3];
    Example e = ds.get(i);
    EXPECT_EQ(e.target.item<int64_t>(), label) << "sample " << i;
    auto mine = testing_golden::digest(e.input);
    EXPECT_EQ(mine[2], d[2]) << "sample " << i;
    EXPECT_EQ(mine[3], d[3]) << "sample " << i;
    EXPECT_NEAR(mine[0], d[0], 1e-9 * (1 + std::abs(d[0])));
    EXPECT_NEAR(mine[1], d[1], 1e-9 * (1 + std::abs(d[1])));
  }
}

TEST(Data, FashionMnistReads) {
  DataOptions o;
  o.dataset = DatasetKind::kFashionMnist;
  DataSplits s = make_datasets(o);  // installed by scripts/install_deps.sh
  EXPECT_EQ(s.train->size(), 60000);
  ASSERT_TRUE(s.test);
  EXPECT_EQ(s.test->size(), 10000);
  auto shape = s.train->shape();
  EXPECT_EQ(shape.channels, 1);
  EXPECT_EQ(shape.height, 28);
  EXPECT_EQ(shape.num_classes, 10);
  // Normalised pixels have roughly zero mean and unit std over a few thousand samples.
  double sum = 0, sq = 0, n = 0;
  for (int64_t i = 0; i < 2000; ++i) {
    auto x = s.train->get(i).input;
    sum += x.sum().item<double>();
    sq += x.pow(2).sum().item<double>();
    n += static_cast<double>(x.numel());
  }
  EXPECT_NEAR(sum / n, 0.0, 0.05);
  EXPECT_NEAR(std::sqrt(sq / n - (sum / n) * (sum / n)), 1.0, 0.05);
}

TEST(Data, MissingAndDamagedFilesNameTheFile) {
  std::string dir = testing::TempDir() + "idx_bad";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  DataOptions o;
  o.dataset = DatasetKind::kFashionMnist;
  o.data_dir = dir;
  try {
    make_datasets(o);
    FAIL() << "expected an OptionError";
  } catch (const OptionError& e) {  // the field that named the folder, in the library's words
    ASSERT_EQ(e.fields().size(), 1u);
    EXPECT_EQ(e.fields()[0].address, &o.data_dir);
    EXPECT_EQ(e.base(), &o);
    EXPECT_EQ(
        std::string(e.what()).rfind("DataOptions::data_dir: folder '" + dir +
                                        "' has no train-images-idx3-ubyte(.gz): it is not Fashion-MNIST's",
                                    0),
        0u)
        << e.what();
  }
  // A truncated image file: right magic, too few bytes.
  {
    gzFile f = gzopen((dir + "/train-images-idx3-ubyte.gz").c_str(), "wb");
    unsigned char hdr[16] = {0, 0, 8, 3, 0, 0, 0, 10, 0, 0, 0, 28, 0, 0, 0, 28};
    gzwrite(f, hdr, 16);
    gzclose(f);
    std::ofstream(dir + "/train-labels-idx1-ubyte") << "junk";
  }
  try {
    make_datasets(o);
    FAIL() << "expected a UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
}

TEST(Data, LoaderOrderIndependentOfWorkers) {
  SyntheticDataset ds(103, {1, 4, 4, 5});
  std::vector<int64_t> idx;
  for (int64_t i = 102; i >= 0; --i) idx.push_back(i);
  std::vector<std::vector<at::Tensor>> runs;
  for (int workers : {0, 1, 3}) {
    Loader loader(ds, {10, workers, 2, true});
    loader.start(idx);
    std::vector<at::Tensor> got;
    while (auto b = loader.next()) {
      EXPECT_EQ(b->inputs.size(0), 10);
      got.push_back(b->inputs);
      got.push_back(b->targets);
    }
    EXPECT_EQ(got.size(), 20u);  // 10 full batches, the tail of 3 dropped
    runs.push_back(got);
  }
  for (size_t r = 1; r < runs.size(); ++r)
    for (size_t k = 0; k < runs[0].size(); ++k) EXPECT_TRUE(runs[0][k].equal(runs[r][k])) << r << "," << k;
  // Batch 0 holds samples 102..93, in sampler order.
  EXPECT_TRUE(runs[0][0][0].equal(ds.get(102).input));
}

// The Loader is public (data/loader.h): options that hung next() for ever (no workers, no batch
// prefetched) or divided by zero (SIGFPE) are an OptionError naming the field, at construction.
TEST(Data, ALoaderOfOptionsThatCannotWorkIsRefusedByName) {
  SyntheticDataset ds(16, {1, 4, 4, 5});
  const auto refused = [&](LoaderOptions o, const std::string& field) {
    try {
      Loader loader(ds, o);
      ADD_FAILURE() << field << " was taken";
    } catch (const OptionError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  refused({0, 1, 2, true}, "batch_size=0 must be > 0");
  refused({4, -1, 2, true}, "num_workers=-1 must be >= 0");
  refused({4, 1, 0, true}, "prefetch_factor=0 must be > 0");
}

TEST(Data, LoaderSkipAndEarlyStop) {
  SyntheticDataset ds(64, {1, 2, 2, 3});
  std::vector<int64_t> idx(64);
  for (int64_t i = 0; i < 64; ++i) idx[static_cast<size_t>(i)] = i;
  Loader loader(ds, {8, 2, 2, true});
  loader.start(idx, /*skip_batches=*/3);
  auto b = loader.next();
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->inputs[0].equal(ds.get(24).input));
  loader.stop();  // must not hang with workers blocked on a full queue
  loader.start(idx);
  int n = 0;
  while (loader.next()) ++n;
  EXPECT_EQ(n, 8);
}

// Note [A batch that fails comes in its turn]: batch 5 (a usage error at sample 21) and batch 7
// (an Error at sample 29) fail; the early samples are slow, so the workers reach both while the
// trainer still waits for the first batches. The trainer gets batches 0-4 in order, then batch
// 5's own error (its class and its sample), again on a further call; the loader then restarts.
// Before, the first failure in time was rethrown at once: up to num_workers x prefetch batches
// early, possibly batch 7's.
TEST(Data, ABatchThatFailsComesInItsTurnAfterTheBatchesBeforeIt) {
  struct FailingAt : Dataset {
    int64_t size() const override { return 64; }
    Example get(int64_t i) const override {
      if (i == 21) throw UsageError("sample 21 does not decode");
      if (i == 29) throw Error("sample 29 cannot be read");
      if (i < 20) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return {at::zeros({3}), at::scalar_tensor(i, at::kLong)};
    }
  } ds;
  std::vector<int64_t> idx(64);
  for (int64_t i = 0; i < 64; ++i) idx[static_cast<size_t>(i)] = i;
  for (const int workers : {0, 2, 3, 4}) {
    Loader loader(ds, {4, workers, 4, true});
    loader.start(idx);
    std::vector<int64_t> got;
    std::string error = "(none)";
    try {
      while (auto b = loader.next()) got.insert(got.end(), b->indices.begin(), b->indices.end());
    } catch (const UsageError& e) {
      error = e.what();
    } catch (const std::exception& e) {
      error = std::string("not a usage error: ") + e.what();
    }
    std::vector<int64_t> want(20);
    for (int64_t i = 0; i < 20; ++i) want[static_cast<size_t>(i)] = i;
    EXPECT_EQ(got, want) << workers << " workers";
    EXPECT_NE(error.find("sample 21 does not decode"), std::string::npos) << workers << " workers: " << error;
    EXPECT_THROW(loader.next(), UsageError) << workers << " workers";
    loader.start(std::vector<int64_t>(want.begin(), want.end()));
    int n = 0;
    while (loader.next()) ++n;
    EXPECT_EQ(n, 5) << workers << " workers";
  }
}

// A sample of another shape than its batch's first is a usage error naming it and both shapes,
// as PyTorch's default collate refuses to stack it. Before, copy_ broadcast it: sample 5's
// greyscale (1, 2, 2) image became 3 equal channels of an RGB batch, without a word.
TEST(Data, ASampleOfAnotherShapeThanItsBatchIsAnError) {
  struct OneGrey : Dataset {
    int64_t size() const override { return 8; }
    Example get(int64_t i) const override {
      return {at::ones({i == 5 ? 1 : 3, 2, 2}), at::scalar_tensor(i % 2, at::kLong)};
    }
  } ds;
  std::vector<int64_t> idx(8);
  for (int64_t i = 0; i < 8; ++i) idx[static_cast<size_t>(i)] = i;
  for (const int workers : {0, 2}) {
    Loader loader(ds, {4, workers, 2, true});
    loader.start(idx);
    std::string error = "(none)";
    try {
      while (loader.next()) {
      }
    } catch (const UsageError& e) {
      error = e.what();
    }
    EXPECT_NE(error.find("sample 5's input has shape [1, 2, 2], the batch's first [3, 2, 2]"),
              std::string::npos)
        << workers << " workers: " << error;
  }
}

namespace {

std::string fresh(const std::string& name) {
  std::string dir = testing::TempDir() + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string usage_error_of(const DataOptions& o, const TrainingSplit* trained = nullptr) {
  try {
    make_datasets(o, {}, 0, trained);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

// n CIFAR-10 records: label i % 10, pixel bytes (i + c + y + x) % 256.
std::string cifar_records(int n) {
  std::string b;
  for (int i = 0; i < n; ++i) {
    b.push_back(static_cast<char>(i % 10));
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) b.push_back(static_cast<char>((i + c + y + x) % 256));
  }
  return b;
}

}  // namespace

TEST(Data, Cifar10BinaryFilesReadAndChecked) {
  const std::string dir = fresh("cifar");
  for (int k = 1; k <= 5; ++k)
    std::ofstream(dir + "/data_batch_" + std::to_string(k) + ".bin", std::ios::binary) << cifar_records(4);
  std::ofstream(dir + "/test_batch.bin", std::ios::binary) << cifar_records(3);
  DataOptions o;
  o.dataset = DatasetKind::kCifar10;
  o.data_dir = dir;
  DataSplits s = make_datasets(o);
  ASSERT_EQ(s.train->size(), 20);
  ASSERT_EQ(s.test->size(), 3);
  EXPECT_EQ(s.train->shape().channels, 3);
  Example e = s.train->get(7);  // record 3 of data_batch_2
  EXPECT_EQ(e.target.item<int64_t>(), 3);
  // Pixel (c=1, y=2, x=5) of record 3 is (3 + 1 + 2 + 5) = 11, normalised with channel 1's stats.
  EXPECT_NEAR(e.input[1][2][5].item<float>(), (11 / 255.0f - 0.4822f) / 0.2435f, 1e-6);
  // Damaged: a truncated file, then a bad label.
  std::ofstream(dir + "/test_batch.bin", std::ios::binary) << cifar_records(3).substr(0, 3 * 3073 - 1);
  std::string err = usage_error_of(o);
  EXPECT_NE(err.find("test_batch.bin' is not CIFAR-10 binary data"), std::string::npos) << err;
  std::string bad = cifar_records(3);
  bad[3073] = 42;
  std::ofstream(dir + "/test_batch.bin", std::ios::binary) << bad;
  err = usage_error_of(o);
  EXPECT_NE(err.find("has label 42"), std::string::npos) << err;
  std::filesystem::remove(dir + "/data_batch_4.bin");
  err = usage_error_of(o);
  EXPECT_NE(err.find("data_batch_4.bin"), std::string::npos) << err;
}

TEST(Data, MnistUsesItsOwnNormalisation) {
  const std::string dir = fresh("mnist");
  // 2 images of 2x2 and their labels, plain (not gzipped) IDX files.
  std::string img = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2};
  img += std::string("\x00\xff\x80\x01\x02\x03\x04\x05", 8);
  std::ofstream(dir + "/train-images-idx3-ubyte", std::ios::binary) << img;
  std::ofstream(dir + "/t10k-images-idx3-ubyte", std::ios::binary) << img;
  std::string lab = {0, 0, 8, 1, 0, 0, 0, 2, 7, 9};
  std::ofstream(dir + "/train-labels-idx1-ubyte", std::ios::binary) << lab;
  std::ofstream(dir + "/t10k-labels-idx1-ubyte", std::ios::binary) << lab;
  DataOptions o;
  o.dataset = DatasetKind::kMnist;
  o.data_dir = dir;
  DataSplits s = make_datasets(o);
  ASSERT_EQ(s.train->size(), 2);
  Example e = s.train->get(0);
  EXPECT_EQ(e.target.item<int64_t>(), 7);
  EXPECT_NEAR(e.input[0][0][1].item<float>(), (1.0f - 0.1307f) / 0.3081f, 1e-6);
  // A damaged label byte (255) would make 256 classes with 246 of them empty; a test label
  // past the training split's classes would fail at the first evaluation, an epoch later.
  const auto labels = [&](const char* prefix, char second) {
    std::string l = lab;
    l[9] = second;
    std::ofstream(dir + "/" + prefix + "-labels-idx1-ubyte", std::ios::binary) << l;
  };
  labels("train", '\xff');
  std::string err = usage_error_of(o);
  EXPECT_NE(err.find("train-labels-idx1-ubyte': label 255 at index 1 makes 256 classes, but class 10 has no "
                     "sample"),
            std::string::npos)
      << err;
  labels("train", 11);  // 12 classes, 10 without a sample
  EXPECT_NE(usage_error_of(o).find("class 10 has no sample"), std::string::npos);
  labels("train", 9);
  labels("t10k", 10);  // the training split has 0..9
  err = usage_error_of(o);
  EXPECT_NE(err.find("t10k-labels-idx1-ubyte': label 10 at index 1 is not a class of the training split"),
            std::string::npos)
      << err;
  labels("t10k", 9);
  EXPECT_EQ(make_datasets(o).test->size(), 2);
  // A header whose sizes multiply past 64 bits is malformed, not read.
  std::string huge = img;
  for (const int at : {4, 8, 12}) huge.replace(static_cast<size_t>(at), 4, "\xff\xff\xff\xff");
  std::ofstream(dir + "/train-images-idx3-ubyte", std::ios::binary) << huge;
  err = usage_error_of(o);
  EXPECT_NE(err.find("train-images-idx3-ubyte' is truncated or malformed"), std::string::npos) << err;
  img[3] = 4;  // wrong magic
  std::ofstream(dir + "/train-images-idx3-ubyte", std::ios::binary) << img;
  err = usage_error_of(o);
  EXPECT_NE(err.find("train-images-idx3-ubyte' is not an IDX image file"), std::string::npos) << err;
}

// A checkpoint's record of its training split (train/training_split.h) lets eval open the test
// split alone: a folder with only MNIST's t10k files reads, labelled against the recorded
// classes, and the training files are never looked for.
TEST(Data, ATestSplitAloneIsCheckedAgainstTheRecordedTrainingSplit) {
  const std::string dir = fresh("mnist_test_only");
  std::string img = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2};
  img += std::string("\x00\xff\x80\x01\x02\x03\x04\x05", 8);
  std::ofstream(dir + "/t10k-images-idx3-ubyte", std::ios::binary) << img;
  const auto labels = [&](char second) {
    std::ofstream(dir + "/t10k-labels-idx1-ubyte", std::ios::binary)
        << std::string{0, 0, 8, 1, 0, 0, 0, 2, 7, second};
  };
  labels(9);
  DataOptions o;
  o.dataset = DatasetKind::kMnist;
  o.data_dir = dir;
  EXPECT_NE(usage_error_of(o).find("train-images-idx3-ubyte"), std::string::npos) << "both splits were read";
  const TrainingSplit trained{{1, 2, 2, 10}, {}};
  const DataSplits s = make_datasets(o, {}, 0, &trained);
  EXPECT_EQ(s.train, nullptr);
  ASSERT_NE(s.test, nullptr);
  EXPECT_EQ(s.test->size(), 2);
  EXPECT_EQ(s.test->get(1).target.item<int64_t>(), 9);
  labels(10);
  std::string err = usage_error_of(o, &trained);
  EXPECT_NE(err.find("label 10 at index 1 is not a class of the training split (the checkpoint's training "
                     "split has classes 0..9"),
            std::string::npos)
      << err;
  labels(9);  // a model built for images of 3 channels (evaluated before as another model's weights)
  const TrainingSplit rgb{{3, 2, 2, 10}, {}};
  err = usage_error_of(o, &rgb);
  EXPECT_NE(err.find("the test split's images have 1 channels and 10 classes, but the checkpoint's training "
                     "split's had 3 and 10"),
            std::string::npos)
      << err;
}

// A tensors test split alone is checked against the recorded kind of targets too: float targets
// as many as the recorded classes passed as a classifier's test split before (its cross-entropy
// then read them as class probabilities). A record without the kind (written before it was
// kept, or of a user's dataset, which need not say it) checks the rest alone.
TEST(Data, ATensorsTestSplitAloneIsCheckedForTheRecordedKindOfTargets) {
  const std::string dir = fresh("tensors_test_only");
  const auto test_split = [&](const at::Tensor& labels) {
    std::ofstream(dir + "/test.pt", std::ios::binary)
        << pickle_tensors({{"images", at::zeros({4, 1, 2, 2}, at::kByte)}, {"labels", labels}});
  };
  DataOptions o;
  o.dataset = DatasetKind::kTensors;
  o.data_dir = dir;
  TrainingSplit classes{{1, 2, 2, 3}, {}};
  classes.shape.float_targets = false;
  TrainingSplit values = classes;
  values.shape.float_targets = true;
  test_split(at::zeros({4, 3}));
  std::string err = usage_error_of(o, &classes);
  EXPECT_NE(
      err.find("test.pt': labels are float targets but the checkpoint's training split has class indices"),
      std::string::npos)
      << err;
  EXPECT_EQ(make_datasets(o, {}, 0, &values).test->size(), 4);
  TrainingSplit unrecorded = classes;  // a record from before, or of a user's dataset
  unrecorded.shape.float_targets.reset();
  EXPECT_EQ(make_datasets(o, {}, 0, &unrecorded).test->size(), 4);
  test_split(at::arange(4) % 3);
  err = usage_error_of(o, &values);
  EXPECT_NE(
      err.find("test.pt': labels are class indices but the checkpoint's training split has float targets"),
      std::string::npos)
      << err;
  EXPECT_EQ(make_datasets(o, {}, 0, &classes).test->size(), 4);
}

// Augmentation is a pure function of (seed, epoch, index): batches are bitwise the same for
// 0, 1, 2 and 4 loader threads and across a resume (skipping batches), and differ between
// epochs; a crop moves pixels, a flip mirrors them.
TEST(Data, AugmentationSameForAnyWorkerCountAndAcrossAResume) {
  const AugmentOptions ao{2, true, 42};
  auto epoch_batches = [&](int workers, int64_t epoch, int64_t skip) {
    AugmentedDataset ds(std::make_unique<SyntheticDataset>(96, DatasetShape{3, 8, 8, 10}), ao);
    ds.set_epoch(epoch);
    std::vector<int64_t> idx(96);
    for (int64_t i = 0; i < 96; ++i) idx[static_cast<size_t>(i)] = (i * 37) % 96;
    Loader loader(ds, {8, workers, 2, true});
    loader.start(idx, skip);
    std::vector<at::Tensor> got;
    while (auto b = loader.next()) got.push_back(b->inputs);
    return got;
  };
  const auto ref = epoch_batches(0, 1, 0);
  ASSERT_EQ(ref.size(), 12u);
  for (int workers : {1, 2, 4}) {
    const auto got = epoch_batches(workers, 1, 0);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t k = 0; k < ref.size(); ++k)
      EXPECT_TRUE(got[k].equal(ref[k])) << workers << " workers, batch " << k;
  }
  const auto resumed = epoch_batches(2, 1, 5);
  ASSERT_EQ(resumed.size(), 7u);
  for (size_t k = 0; k < resumed.size(); ++k)
    EXPECT_TRUE(resumed[k].equal(ref[k + 5])) << "resumed batch " << k;
  const auto next_epoch = epoch_batches(2, 2, 0);
  EXPECT_FALSE(next_epoch[0].equal(ref[0]));
  // The choices: deterministic, spread over the offsets, about half flipped.
  int flips = 0;
  std::set<int> offsets;
  for (int64_t i = 0; i < 1000; ++i) {
    const AugmentChoice c = augment_choice(ao, 3, i), again = augment_choice(ao, 3, i);
    EXPECT_EQ(c.dy, again.dy);
    EXPECT_EQ(c.dx, again.dx);
    EXPECT_EQ(c.flip, again.flip);
    EXPECT_TRUE(c.dy >= 0 && c.dy <= 4 && c.dx >= 0 && c.dx <= 4);
    offsets.insert(c.dy * 5 + c.dx);
    flips += c.flip;
  }
  EXPECT_EQ(offsets.size(), 25u);
  EXPECT_GT(flips, 400);
  EXPECT_LT(flips, 600);
  // Pixels: a crop at (dy, dx) = (pad + 1, pad) moves the image up by one row.
  auto img = torch::arange(3 * 4 * 4, at::kFloat).reshape({3, 4, 4});
  auto up = augment_image(img, 2, {3, 2, false});
  EXPECT_TRUE(up.slice(1, 0, 3).equal(img.slice(1, 1, 4)));
  EXPECT_EQ(up[0][3].abs().sum().item<float>(), 0.0f);  // the padding
  EXPECT_TRUE(augment_image(img, 2, {2, 2, true}).equal(img.flip({2})));
  EXPECT_THROW(augment_for(DatasetKind::kSynthetic, 1), UsageError);
}
