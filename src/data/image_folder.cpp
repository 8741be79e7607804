#include "data/image_folder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <utility>

#include "data/image_decode.h"
#include "util/error.h"

namespace ddptrain {
namespace fs = std::filesystem;

namespace {

std::string lower_extension(const fs::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return e;
}

bool is_sample(const std::string& ext) { return ext == ".jpg" || ext == ".jpeg" || ext == ".png"; }

// Formats torchvision's ImageFolder reads and ddptrain does not: an error, not a silent gap.
bool is_other_image(const std::string& ext) {
  return ext == ".bmp" || ext == ".ppm" || ext == ".pgm" || ext == ".tif" || ext == ".tiff" || ext == ".webp";
}

std::vector<std::string> class_folders(const std::string& root) {
  DDP_USAGE_CHECK(fs::is_directory(root), "image folder '", root, "' does not exist or is not a folder");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory()) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  DDP_USAGE_CHECK(
      !names.empty(), "image folder '", root,
      "' has no class folders: it must hold one folder per class of images (ROOT/<class>/<image>.jpg)");
  return names;
}

std::vector<uint8_t> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ImageError(str("cannot open: ", std::strerror(errno)));
  struct stat st {};
  std::vector<uint8_t> bytes;
  if (::fstat(fd, &st) == 0) bytes.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::pread(fd, bytes.data() + got, bytes.size() - got, static_cast<off_t>(got));
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  const int err = errno;
  ::close(fd);
  if (got != bytes.size())
    throw ImageError(str("read ", got, " of ", bytes.size(), " bytes: ", std::strerror(err)));
  return bytes;
}

}  // namespace

ImageFolderDataset::ImageFolderDataset(const std::string& root, ImageFolderOptions opts,
                                       std::vector<std::string> classes)
    : root_(root), opts_(opts) {
  const std::vector<std::string> own = class_folders(root);
  classes_ = classes.empty() ? own : std::move(classes);
  for (const auto& name : own) {
    const auto at = std::find(classes_.begin(), classes_.end(), name);
    DDP_USAGE_CHECK(
        at != classes_.end(), "image folder '", root, "' has class folder '", name,
        "', which the training split has not (its ", classes_.size(),
        " classes are its folders' names): a validation split's classes must be the training split's");
    scan_class(name, static_cast<int>(at - classes_.begin()));
  }
}

void ImageFolderDataset::scan_class(const std::string& name, int label) {
  // torchvision: sorted(os.walk(class folder, followlinks=True)), each folder's names sorted.
  std::vector<std::pair<std::string, std::string>> files;  // (folder under root, name)
  std::string other;
  int64_t others = 0;
  const fs::path dir = fs::path(root_) / name;
  const auto add = [&](const fs::directory_entry& e) {
    if (!e.is_regular_file()) return;
    const std::string ext = lower_extension(e.path());
    if (is_sample(ext))
      files.emplace_back(fs::relative(e.path().parent_path(), root_).string(), e.path().filename().string());
    else if (is_other_image(ext) && others++ == 0)
      other = e.path().string();
  };
  for (const auto& e : fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink))
    add(e);
  DDP_USAGE_CHECK(
      others == 0, "image file '", other, "' (and ", others - 1, " more in '", dir.string(),
      "') is in a format ddptrain does not decode: it reads JPEG and PNG; convert the files (e.g. "
      "with Pillow: Image.open(f).convert('RGB').save(f_png)) or move them out of the folder");
  DDP_USAGE_CHECK(!files.empty(), "class folder '", dir.string(),
                  "' holds no images (.jpg, .jpeg or .png): remove the folder or add its images");
  std::sort(files.begin(), files.end());
  for (const auto& [folder, file] : files) {
    names_ += folder + "/" + file;
    ends_.push_back(names_.size());
    labels_.push_back(label);
  }
}

std::string ImageFolderDataset::file(int64_t index) const {
  const auto i = static_cast<size_t>(index);
  const size_t begin = i == 0 ? 0 : ends_[i - 1];
  return root_ + "/" + names_.substr(begin, ends_[i] - begin);
}

DatasetShape ImageFolderDataset::shape() const {
  return {3, opts_.image_size, opts_.image_size, static_cast<int>(classes_.size())};
}

at::Tensor ImageFolderDataset::image(int64_t index, int64_t epoch) const {
  const std::vector<uint8_t> bytes = read_file(file(index));
  const ImageSize full = image_size(bytes.data(), bytes.size());
  const int S = opts_.image_size;
  SampleRandom rng(opts_.seed, epoch, index);
  const CropBox box = opts_.random_crop ? random_resized_crop_box(full.height, full.width, rng)
                                        : resize_center_crop_box(full.height, full.width, opts_.resize(), S);
  const bool flip = opts_.random_crop && rng.uniform() < 0.5;
  const bool jpeg = sniff_image(bytes.data(), bytes.size()) == ImageFormat::kJpeg;
  const int eighths = jpeg && opts_.jpeg_dct_scaling ? decode_eighths(box, S, S) : 8;
  const int scaled_h = jpeg ? scaled_dim(full.height, eighths) : full.height;
  const int scaled_w = jpeg ? scaled_dim(full.width, eighths) : full.width;
  CropBox at = scale_box(box, full.height, full.width, scaled_h, scaled_w);
  // A random crop's filter reads only the box: a JPEG decodes only the box's rows and columns.
  const FilterReach reach = opts_.random_crop ? FilterReach::kBox : FilterReach::kImage;
  DecodedImage img;
  if (jpeg && reach == FilterReach::kBox) {
    const int top = static_cast<int>(std::floor(at.top)), left = static_cast<int>(std::floor(at.left));
    img = decode_jpeg_region(bytes.data(), bytes.size(), eighths,
                             {top, left, static_cast<int>(std::ceil(at.top + at.height)) - top,
                              static_cast<int>(std::ceil(at.left + at.width)) - left});
    at.top -= img.top;
    at.left -= img.left;
  } else {
    img = decode_image(bytes.data(), bytes.size(), eighths);
  }
  at::Tensor out = at::empty({3, S, S}, at::kFloat);
  resample_box(img.rgb.data(), img.height, img.width, at, reach, S, S, flip, opts_.normalize,
               out.data_ptr<float>());
  return out;
}

Example ImageFolderDataset::get(int64_t index) const {
  const int64_t epoch = epoch_.load();
  std::string last;
  for (int64_t tries = 0; tries < size(); ++tries) {
    const int64_t i = (index + tries) % size();
    {
      std::lock_guard<std::mutex> lock(bad_mu_);
      if (bad_.count(i) != 0) continue;
    }
    try {
      return {image(i, epoch), at::scalar_tensor(label(i), at::kLong)};
    } catch (const ImageError& e) {
      if (opts_.bad_images == BadImagePolicy::kError)
        throw UsageError(str("image file '", file(i), "' does not decode: ", e.what(),
                             "; replace or remove it, or skip such files (bad_images=skip)"));
      last = file(i) + ": " + e.what();
      std::lock_guard<std::mutex> lock(bad_mu_);
      if (bad_.insert(i).second) reported_.push_back(last);
    }
  }
  throw UsageError(
      str("no image in '", root_, "' decodes (", last.empty() ? "all were skipped before" : last, ")"));
}

std::vector<std::string> ImageFolderDataset::take_skipped() const {
  std::lock_guard<std::mutex> lock(bad_mu_);
  return std::exchange(reported_, {});
}

}  // namespace ddptrain
