#include "data/image_folder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "data/image_decode.h"
#include "util/error.h"
#include "util/files.h"
#include "util/fnv.h"

namespace ddptrain {
namespace fs = std::filesystem;

namespace {

// From the name's last dot, as torchvision's name.lower().endswith(...) sees it (a file named
// ".png" is one, where path::extension() says "").
std::string lower_extension(const fs::path& p) {
  const std::string name = p.filename().string();
  const size_t dot = name.rfind('.');
  std::string e = dot == std::string::npos ? std::string() : name.substr(dot);
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

// Note [A read that fails is not a bad image]: bad_images=skip skips an image that does not
// decode, the same on every rank and after a resume since the file is. A file that cannot be
// opened or read (EIO, a network filesystem's stall, too many open files) says nothing of the
// image, and skipping it would replace it for the rest of the run on this rank only: an Error
// (the run stops, as torchvision's loader does), never an ImageError.
std::vector<uint8_t> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw Error(str("cannot open image file '", path, "': ", std::strerror(errno),
                    " (Note [A read that fails is not a bad image]: bad_images=skip (--bad_images skip) does "
                    "not skip it)"));
  struct stat st {};
  std::vector<uint8_t> bytes;
  errno = 0;
  const bool ok = ::fstat(fd, &st) == 0 && (bytes.resize(static_cast<size_t>(st.st_size)),
                                            read_fully_at(fd, bytes.data(), bytes.size(), 0));
  const int err = errno;
  ::close(fd);
  if (!ok)
    throw Error(str("cannot read image file '", path,
                    "': ", err != 0 ? std::strerror(err) : "it became shorter while read",
                    " (Note [A read that fails is not a bad image]: bad_images=skip (--bad_images skip) does "
                    "not skip it)"));
  return bytes;
}

}  // namespace

ImageFolderDataset::ImageFolderDataset(const std::string& root, ImageFolderOptions opts,
                                       std::vector<std::string> classes)
    : ImageDataset(opts, "image file", str("image folder '", root, "'")), root_(root) {
  const std::vector<std::string> own = class_folders(root);
  classes_ = classes.empty() ? own : std::move(classes);
  for (const auto& name : own) {
    const auto at = std::find(classes_.begin(), classes_.end(), name);
    DDP_USAGE_CHECK(
        at != classes_.end(), "image folder '", root, "' has class folder '", name,
        "', which the training split has not (it has ", classes_.size(),
        " classes, named by its folders): a validation split's classes must be the training split's");
    scan_class(name, static_cast<int>(at - classes_.begin()));
  }
}

void ImageFolderDataset::scan_class(const std::string& name, int label) {
  // torchvision: sorted(os.walk(class folder, followlinks=True)), each folder's names sorted.
  std::vector<std::pair<std::string, std::string>> files;  // (folder under root, name)
  std::string other;
  int64_t others = 0;
  const fs::path dir = fs::path(root_) / name;
  const std::string dir_name = dir.string();
  const auto add = [&](const fs::directory_entry& e) {
    const std::string ext = lower_extension(e.path());
    if (e.is_directory()) return;
    // torchvision's walk lists a link to a missing file as a sample, whose load then fails:
    // never a sample dropped without a word.
    DDP_USAGE_CHECK(e.is_regular_file() || !(is_sample(ext) || is_other_image(ext)), "'", e.path().string(),
                    "' has an image's name but is not a file that can be read (a link to a missing file?): ",
                    "restore or remove it");
    if (!e.is_regular_file()) return;
    // The folder as the walk wrote it (under a linked folder: the link's name, as os.walk's),
    // never resolved as fs::relative would.
    const std::string folder = e.path().parent_path().string();
    DDP_ASSERT(folder.compare(0, dir_name.size(), dir_name) == 0, "a walk left its folder");
    if (is_sample(ext))
      files.emplace_back(name + folder.substr(dir_name.size()), e.path().filename().string());
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

uint64_t ImageFolderDataset::label_names_hash() const {
  uint64_t h = kFnvOffset;
  for (const std::string& c : classes_) h = fnv1a(c + '\n', h);
  return h;
}

uint64_t ImageFolderDataset::files_hash() const {
  uint64_t h = kFnvOffset;
  size_t begin = 0;
  for (const size_t end : ends_) {
    h = fnv1a(std::string_view(names_).substr(begin, end - begin), h);
    h = fnv1a(std::string_view("\n"), h);
    begin = end;
  }
  return h;
}

std::vector<uint8_t> ImageFolderDataset::bytes(int64_t index) const { return read_file(file(index)); }

}  // namespace ddptrain
