#include "data/tar_index.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "util/error.h"
#include "util/files.h"
#include "util/strings.h"

namespace ddptrain {
namespace {

constexpr int64_t kBlock = 512;
constexpr int64_t kMaxHeaderData = int64_t{1} << 20;  // a long name's or a pax header's bytes

int64_t padded(int64_t n) { return (n + kBlock - 1) / kBlock * kBlock; }

// A NUL-terminated field's text (its bytes up to the first NUL).
std::string field_text(const unsigned char* f, size_t n) {
  size_t len = 0;
  while (len < n && f[len] != 0) ++len;
  return std::string(reinterpret_cast<const char*>(f), len);
}

// A header's number, as Python's tarfile reads it: GNU's base-256 when the first byte has its
// high bit (0x80; 0xff, a negative number, is refused), else octal text up to the first NUL,
// surrounding spaces ignored, empty = 0. False when it is neither.
bool tar_number(const unsigned char* f, size_t n, int64_t* out) {
  if (f[0] & 0x80) {
    if (f[0] != 0x80) return false;
    uint64_t v = 0;
    for (size_t i = 1; i < n; ++i) {
      if (v >> 55) return false;
      v = v << 8 | f[i];
    }
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(v);
    return true;
  }
  const std::string text = field_text(f, n);
  size_t b = text.find_first_not_of(" \t\n\r\v\f"), e = text.find_last_not_of(" \t\n\r\v\f");
  int64_t v = 0;
  for (size_t i = b; b != std::string::npos && i <= e; ++i) {
    if (text[i] < '0' || text[i] > '7' || v > (std::numeric_limits<int64_t>::max() >> 3)) return false;
    v = v * 8 + (text[i] - '0');
  }
  *out = v;
  return true;
}

// The checksum test: the stored sum equals the header's bytes summed, its own field counted as
// spaces, unsigned or (as some old tars computed it) signed.
bool checksum_ok(const unsigned char* h) {
  int64_t stored = 0;
  if (!tar_number(h + 148, 8, &stored)) return false;
  int64_t unsigned_sum = 0, signed_sum = 0;
  for (int i = 0; i < kBlock; ++i) {
    const unsigned char c = i >= 148 && i < 156 ? ' ' : h[i];
    unsigned_sum += c;
    signed_sum += static_cast<signed char>(c);
  }
  return stored == unsigned_sum || stored == signed_sum;
}

// What a compressed archive starts with, or null.
const char* compression(const unsigned char* h, int64_t size) {
  if (size >= 2 && h[0] == 0x1f && h[1] == 0x8b) return "gzip";
  if (size >= 3 && std::memcmp(h, "BZh", 3) == 0) return "bzip2";
  if (size >= 6 && std::memcmp(h,
                               "\xfd"
                               "7zXZ\0",
                               6) == 0)
    return "xz";
  if (size >= 4 && std::memcmp(h, "\x28\xb5\x2f\xfd", 4) == 0) return "zstd";
  return nullptr;
}

// Walks one archive's headers.
class TarScan {
 public:
  TarScan(std::string path, int fd, int64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}
  std::vector<TarMember> run();

 private:
  [[noreturn]] void fail(int64_t at, const std::string& why) const {
    throw UsageError(str("tar shard '", path_, "': ", why, " at byte ", at,
                         at_member_.empty() ? "" : str(" (member '", at_member_, "')"),
                         "; rewrite the shard (e.g. with Python's tarfile or webdataset's TarWriter)"));
  }
  std::string data(int64_t at, int64_t size, const char* what);
  void pax(const std::string& records, int64_t at, bool global);

  std::string path_;
  int fd_;
  int64_t size_;
  std::string at_member_;   // the last member's name, for messages
  std::string next_name_;   // from a GNU long name or a pax path, for the next member
  int64_t next_size_ = -1;  // from a pax size, for the next member
  bool has_next_name_ = false;
};

std::string TarScan::data(int64_t at, int64_t size, const char* what) {
  if (size > kMaxHeaderData)
    fail(at, str("a ", what, " of ", size, " bytes (over the 1 MiB this reader takes)"));
  if (size > size_ - at) fail(at, str("a ", what, " cut short by the file's end (", size, " bytes)"));
  std::string s(static_cast<size_t>(size), '\0');
  errno = 0;
  if (!read_fully_at(fd_, s.data(), s.size(), at)) fail(at, str("cannot read: ", std::strerror(errno)));
  return s;
}

// pax records, "LEN key=value\n" each: path and size apply to the next member.
void TarScan::pax(const std::string& r, int64_t at, bool global) {
  size_t pos = 0;
  while (pos < r.size() && r[pos] != '\0') {
    size_t sp = pos, len = 0;
    while (sp < r.size() && r[sp] >= '0' && r[sp] <= '9' && len <= r.size()) len = len * 10 + (r[sp++] - '0');
    const size_t eq = r.find('=', sp);
    if (sp == pos || sp >= r.size() || r[sp] != ' ' || len > r.size() - pos || eq == std::string::npos ||
        eq >= pos + len || r[pos + len - 1] != '\n')
      fail(at, str("a pax header whose record at offset ", pos, " is not 'LEN key=value\\n'"));
    const std::string key = r.substr(sp + 1, eq - sp - 1), value = r.substr(eq + 1, pos + len - eq - 2);
    if (key.rfind("GNU.sparse.", 0) == 0)
      fail(at, "a sparse file (pax GNU.sparse records), which this reader does not take");
    if (key == "path" || key == "size") {
      if (global) fail(at, str("a global pax header setting '", key, "' for every member"));
      if (key == "path") {
        if (!has_next_name_) {  // stacked: the first (outer) one wins, as in Python's tarfile
          const size_t end = value.find_last_not_of('/');
          next_name_ = end == std::string::npos ? "" : value.substr(0, end + 1);
        }
        has_next_name_ = true;
      } else {
        int64_t v = 0;
        size_t i = 0;
        for (; i < value.size() && value[i] >= '0' && value[i] <= '9' && v < (int64_t{1} << 56); ++i)
          v = v * 10 + (value[i] - '0');
        if (value.empty() || i != value.size())
          fail(at, str("a pax size '", value, "' that is not a number"));
        if (next_size_ < 0) next_size_ = v;
      }
    }
    pos += len;
  }
}

std::vector<TarMember> TarScan::run() {
  std::vector<TarMember> members;
  unsigned char h[kBlock];
  int64_t at = 0;
  while (at < size_) {
    if (size_ - at < kBlock)
      fail(at, str("a header cut short by the file's end (", size_ - at, " of 512 bytes)"));
    errno = 0;
    if (!read_fully_at(fd_, h, kBlock, at)) fail(at, str("cannot read: ", std::strerror(errno)));
    if (at == 0)
      if (const char* c = compression(h, size_))
        throw UsageError(str("tar shard '", path_, "' is ", c,
                             "-compressed: ddptrain reads shards by index and needs them uncompressed "
                             "(decompress them once; JPEG and PNG members do not shrink anyway)"));
    bool zero = true;
    for (unsigned char c : h) zero = zero && c == 0;
    if (zero) break;  // the end-of-archive marker
    if (!checksum_ok(h))
      fail(at, at == 0 ? "not a tar archive (its first header's checksum does not match)"
                       : "a header whose checksum does not match (a damaged archive)");
    int64_t size = 0;
    if (!tar_number(h + 124, 12, &size)) fail(at, "a header whose size field is not a number");
    const char type = static_cast<char>(h[156]);
    const std::string raw_name = field_text(h, 100);
    // Python's tarfile: an old-style regular file whose name ends in '/' is a folder.
    const bool folder = type == '\0' && !raw_name.empty() && raw_name.back() == '/';
    const bool no_data = folder || (type >= '1' && type <= '6');  // links, devices, folders: size ignored
    const int64_t body = at + kBlock;
    if (type == 'L' || type == 'K' || type == 'x' || type == 'X' || type == 'g') {
      const std::string d = data(body, size, type == 'L' || type == 'K' ? "long name" : "pax header");
      if (type == 'L') {
        if (!has_next_name_)  // stacked: the first (outer) one wins, as in Python's tarfile
          next_name_ = field_text(reinterpret_cast<const unsigned char*>(d.data()), d.size());
        has_next_name_ = true;
      } else if (type != 'K') {
        pax(d, at, type == 'g');
      }
      at = body + padded(size);
      continue;
    }
    // The ustar prefix field only under POSIX's magic: GNU headers keep other fields there.
    const bool posix = std::memcmp(h + 257, "ustar\0", 6) == 0;
    const std::string prefix = posix ? field_text(h + 345, 155) : "";
    std::string name = prefix.empty() ? raw_name : prefix + "/" + raw_name;
    if (has_next_name_) name = next_name_;
    if (next_size_ >= 0) size = next_size_;
    has_next_name_ = false;
    next_size_ = -1;
    at_member_ = name;
    if (type == 'S') fail(at, "a sparse file (GNU type 'S'), which this reader does not take");
    if (!no_data && size > size_ - body)
      fail(at, str("a member of ", size, " bytes cut short by the file's end"));
    if (!no_data && (type == '0' || type == '\0' || type == '7')) members.push_back({name, body, size});
    at = no_data ? body : body + padded(size);
  }
  if (has_next_name_ || next_size_ >= 0)
    fail(at, "a long name or pax header with no member after it (a truncated archive)");
  return members;
}

}  // namespace

std::vector<TarMember> tar_members(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DDP_USAGE_CHECK(fd >= 0, "cannot open tar shard '", path, "': ", std::strerror(errno));
  struct stat st {};
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  try {
    DDP_USAGE_CHECK(regular, "tar shard '", path, "' is not a regular file");
    std::vector<TarMember> members = TarScan(path, fd, st.st_size).run();
    ::close(fd);
    return members;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

}  // namespace ddptrain
