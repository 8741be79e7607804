// Datasets and loader: synthetic samples equal Python's, IDX files are read and checked,
// and the loader's batches do not depend on the number of workers.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <zlib.h>

#include "config/train_config.h"
#include "data/datasets.h"
#include "data/loader.h"
#include "golden.h"
#include "util/error.h"

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
    EXPECT_EQ(e.label, label) << "sample " << i;
    auto mine = testing_golden::digest(e.image);
    EXPECT_EQ(mine[2], d[2]) << "sample " << i;
    EXPECT_EQ(mine[3], d[3]) << "sample " << i;
    EXPECT_NEAR(mine[0], d[0], 1e-9 * (1 + std::abs(d[0])));
    EXPECT_NEAR(mine[1], d[1], 1e-9 * (1 + std::abs(d[1])));
  }
}

TEST(Data, FashionMnistReads) {
  DataOptions o;
  o.dataset = "fashion-mnist";
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
    auto x = s.train->get(i).image;
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
  o.dataset = "fashion-mnist";
  o.data_dir = dir;
  try {
    make_datasets(o);
    FAIL() << "expected a UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("train-images-idx3-ubyte"), std::string::npos) << e.what();
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
      EXPECT_EQ(b->images.size(0), 10);
      got.push_back(b->images);
      got.push_back(b->labels);
    }
    EXPECT_EQ(got.size(), 20u);  // 10 full batches, the tail of 3 dropped
    runs.push_back(got);
  }
  for (size_t r = 1; r < runs.size(); ++r)
    for (size_t k = 0; k < runs[0].size(); ++k) EXPECT_TRUE(runs[0][k].equal(runs[r][k])) << r << "," << k;
  // Batch 0 holds samples 102..93, in sampler order.
  EXPECT_TRUE(runs[0][0][0].equal(ds.get(102).image));
}

TEST(Data, LoaderSkipAndEarlyStop) {
  SyntheticDataset ds(64, {1, 2, 2, 3});
  std::vector<int64_t> idx(64);
  for (int64_t i = 0; i < 64; ++i) idx[static_cast<size_t>(i)] = i;
  Loader loader(ds, {8, 2, 2, true});
  loader.start(idx, /*skip_batches=*/3);
  auto b = loader.next();
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->images[0].equal(ds.get(24).image));
  loader.stop();  // must not hang with workers blocked on a full queue
  loader.start(idx);
  int n = 0;
  while (loader.next()) ++n;
  EXPECT_EQ(n, 8);
}
