#include "data/wds_index.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "data/tar_index.h"
#include "util/error.h"
#include "util/files.h"
#include "util/strings.h"

namespace ddptrain {
namespace {

constexpr int64_t kMaxLabelBytes = 64;
constexpr int64_t kMaxClasses = int64_t{1} << 20;  // a larger label is more likely a caption's number
constexpr const char* kImageExtensions[] = {"jpg", "jpeg", "png"};
constexpr const char* kLabelExtensions[] = {"cls", "txt"};
// Image formats webdataset decodes and ddptrain does not: named, not silently missing.
constexpr const char* kOtherImageExtensions[] = {"webp", "ppm", "pgm", "pbm", "bmp", "tif", "tiff", "gif"};

// A label's text as Python's int() reads a decimal: surrounding whitespace, an optional '+'.
bool parse_label(const std::string& text, int64_t* out) {
  const size_t b = text.find_first_not_of(" \t\n\r\v\f"), e = text.find_last_not_of(" \t\n\r\v\f");
  if (b == std::string::npos) return false;
  size_t i = text[b] == '+' ? b + 1 : b;
  if (i > e) return false;
  int64_t v = 0;
  for (; i <= e; ++i) {
    if (text[i] < '0' || text[i] > '9' || v > (int64_t{1} << 40)) return false;
    v = v * 10 + (text[i] - '0');
  }
  *out = v;
  return true;
}

// One sample's members by extension, in archive order.
struct Group {
  std::string key;
  std::map<std::string, const TarMember*> by_ext;
};

class ShardSamples {
 public:
  explicit ShardSamples(std::string path) : path_(std::move(path)) {}
  std::vector<WdsSample> run();

 private:
  void finish(const Group& g);
  int64_t read_label(const Group& g, const std::string& ext, const TarMember& m);
  [[noreturn]] void fail(const Group& g, const std::string& why) const {
    throw UsageError(str("tar shard '", path_, "', sample '", g.key, "': ", why));
  }
  std::string path_;
  int fd_ = -1;
  std::vector<WdsSample> out_;
};

int64_t ShardSamples::read_label(const Group& g, const std::string& ext, const TarMember& m) {
  if (m.size > kMaxLabelBytes)
    fail(g, str("its label '", m.name, "' has ", m.size, " bytes: a class label is an integer"));
  if (fd_ < 0) fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  std::string text(static_cast<size_t>(m.size), '\0');
  errno = 0;
  if (fd_ < 0 || !read_fully_at(fd_, text.data(), text.size(), m.offset))
    fail(g, str("cannot read its label '", m.name, "': ", std::strerror(errno)));
  int64_t label = 0;
  if (!parse_label(text, &label) || label >= kMaxClasses)
    fail(g, str("its .", ext, " member '", m.name, "' is not a class label (a non-negative integer below ",
                kMaxClasses, ", ddptrain's bound on classes): it holds '", text.substr(0, 32), "'"));
  return label;
}

void ShardSamples::finish(const Group& g) {
  const TarMember* image = nullptr;
  for (const char* e : kImageExtensions)
    if (!image && g.by_ext.count(e)) image = g.by_ext.at(e);
  if (!image) {
    for (const char* e : kOtherImageExtensions)
      if (g.by_ext.count(e))
        fail(g, str("its image '", g.by_ext.at(e)->name,
                    "' is in a format ddptrain does not decode: it reads JPEG and PNG (members .jpg, .jpeg, "
                    ".png); convert the images when writing the shards"));
    std::string have;
    for (const auto& [ext, m] : g.by_ext) have += (have.empty() ? "" : ", ") + m->name;
    fail(g, str("it has no image member (.jpg, .jpeg or .png); its members: ", have));
  }
  for (const char* e : kLabelExtensions)
    if (g.by_ext.count(e)) {
      out_.push_back({g.key, image->name, image->offset, image->size, read_label(g, e, *g.by_ext.at(e))});
      return;
    }
  fail(g, str("it has no class label: a member ", g.key, ".cls (or .txt) holding the class index"));
}

std::vector<WdsSample> ShardSamples::run() {
  const std::vector<TarMember> members = tar_members(path_);
  Group g;
  try {
    for (const TarMember& m : members) {
      std::string key, ext;
      if (is_meta_member(m.name) || !split_sample_name(m.name, &key, &ext)) continue;
      std::transform(ext.begin(), ext.end(), ext.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      if (!g.by_ext.empty() && key != g.key) {
        finish(g);
        g.by_ext.clear();
      }
      g.key = key;
      if (!g.by_ext.emplace(ext, &m).second)
        fail(g, str("the extension '", ext, "' twice ('", m.name,
                    "'): each member of a sample needs its own extension, as webdataset requires"));
    }
    if (!g.by_ext.empty()) finish(g);
    DDP_USAGE_CHECK(!out_.empty(), "tar shard '", path_,
                    "' holds no sample (no member named KEY.jpg, KEY.png or the like)");
  } catch (...) {
    if (fd_ >= 0) ::close(fd_);
    throw;
  }
  if (fd_ >= 0) ::close(fd_);
  return std::move(out_);
}

}  // namespace

bool split_sample_name(const std::string& name, std::string* key, std::string* extension) {
  // The regex's first try takes its `(?:.*/|)` up to the last slash: a base name that starts
  // with a character other than a dot and holds a dot splits at its first dot. A base name that
  // starts with a dot can only match with `[^.]+` reaching back over the last folder's name
  // (and its slash), which must then hold no dot. A base name without a dot never matches.
  const size_t slash = name.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  const size_t dot = name.find('.', base);
  if (dot == std::string::npos) return false;
  if (dot == base) {
    if (slash == std::string::npos) return false;
    const size_t before = slash == 0 ? std::string::npos : name.rfind('/', slash - 1);
    const size_t folder = before == std::string::npos ? 0 : before + 1;
    if (name.find('.', folder) < slash) return false;
  }
  *key = name.substr(0, dot);
  *extension = name.substr(dot + 1);
  return true;
}

bool is_meta_member(const std::string& name) {
  if (name.rfind("__", 0) != 0) return false;
  const std::string first = name.substr(0, name.find('/'));
  return first.size() >= 4 && first.compare(first.size() - 2, 2, "__") == 0;
}

std::vector<WdsSample> webdataset_samples(const std::string& path) { return ShardSamples(path).run(); }

}  // namespace ddptrain
