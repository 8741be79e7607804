#include "data/datasets.h"

#include <ATen/CPUGeneratorImpl.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/train_config.h"
#include "util/error.h"

namespace ddptrain {

Example SyntheticDataset::get(int64_t index) const {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(index));
  Example e;
  e.image = at::randn({shape_.channels, shape_.height, shape_.width}, gen);
  e.label = at::randint(0, shape_.num_classes, {1}, gen).item<int64_t>();
  return e;
}

std::string read_maybe_gzipped(const std::string& path) {
  DDP_USAGE_CHECK(std::filesystem::is_regular_file(path), "data file '", path,
                  "' does not exist; pass --data_dir with the dataset files (Debian: apt install "
                  "dataset-fashion-mnist)");
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

std::string find_idx_file(const std::string& dir, const std::string& name) {
  std::string plain = dir + "/" + name;
  if (std::filesystem::is_regular_file(plain + ".gz")) return plain + ".gz";
  if (std::filesystem::is_regular_file(plain)) return plain;
  throw UsageError(detail::concat("--data_dir='", dir, "' has no ", name, "(.gz); point --data_dir "
                                  "at the IDX files (Debian: apt install dataset-fashion-mnist)"));
}

}  // namespace

IdxDataset::IdxDataset(const std::string& dir, const std::string& prefix, double mean, double std)
    : mean_(mean), std_(std) {
  std::string ipath = find_idx_file(dir, prefix + "-images-idx3-ubyte");
  std::string ib = read_maybe_gzipped(ipath);
  DDP_USAGE_CHECK(ib.size() >= 16 && be32(ib, 0) == 2051, "'", ipath,
                  "' is not an IDX image file (magic 2051 expected)");
  int64_t n = be32(ib, 4), h = be32(ib, 8), w = be32(ib, 12);
  DDP_USAGE_CHECK(static_cast<int64_t>(ib.size()) == 16 + n * h * w, "'", ipath, "' is truncated: ",
                  ib.size(), " bytes for ", n, " images of ", h, "x", w);
  std::string lpath = find_idx_file(dir, prefix + "-labels-idx1-ubyte");
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
}

DatasetShape IdxDataset::shape() const {
  int64_t max_label = labels_.numel() ? labels_.max().item<int64_t>() : 0;
  return {1, static_cast<int>(images_.size(1)), static_cast<int>(images_.size(2)),
          static_cast<int>(std::max<int64_t>(10, max_label + 1))};
}

Example IdxDataset::get(int64_t index) const {
  Example e;
  e.image = images_[index].to(at::kFloat).div_(255.0).sub_(mean_).div_(std_).unsqueeze(0);
  e.label = labels_.data_ptr<int64_t>()[index];
  return e;
}

DataSplits make_datasets(const DataOptions& opts) {
  DataSplits s;
  if (opts.dataset == "synthetic") {
    DatasetShape shape{opts.in_channels, opts.image_size, opts.image_size, opts.num_classes};
    s.train = std::make_unique<SyntheticDataset>(opts.dataset_size, shape);
  } else if (opts.dataset == "fashion-mnist") {
    s.train = std::make_unique<IdxDataset>(opts.data_dir, "train", 0.2860, 0.3530);
    s.test = std::make_unique<IdxDataset>(opts.data_dir, "t10k", 0.2860, 0.3530);
  } else {
    DDP_ASSERT(false, "unvalidated dataset ", opts.dataset);
  }
  return s;
}

}  // namespace ddptrain
