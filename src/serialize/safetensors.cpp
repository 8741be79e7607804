#include "serialize/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "obs/logger.h"
#include "util/error.h"
#include "util/files.h"
#include "util/json_text.h"

namespace ddptrain {
namespace {

const char* dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "F32";
    case at::kDouble:
      return "F64";
    case at::kHalf:
      return "F16";
    case at::kBFloat16:
      return "BF16";
    case at::kLong:
      return "I64";
    case at::kInt:
      return "I32";
    case at::kShort:
      return "I16";
    case at::kChar:
      return "I8";
    case at::kByte:
      return "U8";
    case at::kBool:
      return "BOOL";
    default:
      return nullptr;
  }
}

at::ScalarType dtype_of(const std::string& name, const std::string& origin, const std::string& tensor) {
  for (at::ScalarType t : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kLong, at::kInt, at::kShort,
                           at::kChar, at::kByte, at::kBool})
    if (name == dtype_name(t)) return t;
  throw Error(
      str(origin, ": tensor '", tensor, "' has safetensors dtype ", name, ", which ddptrain does not read"));
}

uint64_t header_length(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  return n;
}

// safetensors' own bound on the header (MAX_HEADER_SIZE in the Rust reader).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// The header's entries, sorted by name, each checked against the data's size before anything is
// allocated: a dtype we read, a shape whose bytes fit 2^62, offsets inside the data and as long
// as the shape.
std::vector<SafetensorsEntry> parse_header(const std::string& json, uint64_t data_size,
                                           const std::string& origin) {
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    throw Error(str(origin, ": the safetensors header is not JSON (", e.what(), ")"));
  }
  DDP_CHECK(header.is_object(), origin, ": the safetensors header is not a JSON object");
  std::vector<SafetensorsEntry> out;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {  // as safetensors' reader: an object of strings
      bool strings = entry.is_object();
      for (const auto& [k, v] : entry.items()) strings = strings && v.is_string();
      DDP_CHECK(strings, origin, ": the safetensors header's __metadata__ is ", entry.dump(),
                ", not an object of strings");
      continue;
    }
    SafetensorsEntry e;
    e.name = name;
    std::vector<uint64_t> offsets;
    std::string dtype;
    DDP_CHECK(entry.is_object() && entry.contains("shape") && entry["shape"].is_array() &&
                  entry.contains("data_offsets") && entry["data_offsets"].is_array(),
              origin, ": tensor '", name, "' is ", entry.dump().substr(0, 200),
              ", not an object with a shape and data_offsets that are lists");
    try {
      for (const auto& d : entry.at("shape")) {
        DDP_CHECK(d.is_number_integer(), origin, ": tensor '", name, "' has shape ", entry.at("shape").dump(),
                  ", not of whole numbers");
        e.shape.push_back(d.get<int64_t>());
      }
      for (const auto& d : entry.at("data_offsets")) {
        DDP_CHECK(d.is_number_unsigned(), origin, ": tensor '", name, "' has data_offsets ",
                  entry.at("data_offsets").dump(), ", not byte offsets");
        offsets.push_back(d.get<uint64_t>());
      }
      dtype = entry.at("dtype").get<std::string>();
    } catch (const nlohmann::json::exception& ex) {
      throw Error(
          str(origin, ": tensor '", name, "' has no valid shape, data_offsets or dtype (", ex.what(), ")"));
    }
    e.dtype = dtype_of(dtype, origin, name);
    uint64_t bytes = c10::elementSize(e.dtype);
    for (int64_t d : e.shape) {
      DDP_CHECK(d >= 0 && (d == 0 || bytes <= (uint64_t{1} << 62) / static_cast<uint64_t>(d)), origin,
                ": tensor '", name, "' has a shape that is not one");
      bytes *= static_cast<uint64_t>(d);
    }
    DDP_CHECK(offsets.size() == 2 && offsets[0] <= offsets[1] && offsets[1] <= data_size, origin,
              ": tensor '", name, "' has data offsets outside the file");
    DDP_CHECK(offsets[1] - offsets[0] == bytes, origin, ": tensor '", name,
              "' has data offsets that do not match its shape");
    e.begin = offsets[0], e.end = offsets[1];
    out.push_back(std::move(e));
  }
  // As safetensors' own reader: the tensors tile the data, no gap, no overlap, nothing after.
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  for (const SafetensorsEntry& e : out) {
    DDP_CHECK(e.begin == expected, origin, ": tensor '", e.name, "' starts at byte ", e.begin,
              " of the data, not ", expected, " (a gap or an overlap)");
    expected = e.end;
  }
  DDP_CHECK(expected == data_size, origin, ": the tensors end at byte ", expected, " of data of ", data_size,
            " bytes");
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

}  // namespace

bool is_safetensors(const std::string& bytes) {
  return bytes.size() >= 10 && header_length(bytes) <= bytes.size() - 8 && bytes[8] == '{';
}

bool is_safetensors_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  std::string head(9, '\0');
  const bool ok = ::fstat(fd, &st) == 0 && st.st_size >= 10 && read_fully_at(fd, head.data(), 9, 0) &&
                  header_length(head) <= static_cast<uint64_t>(st.st_size) - 8 && head[8] == '{';
  ::close(fd);
  return ok;
}

NamedTensors read_safetensors(const std::string& bytes, const std::string& origin) {
  DDP_CHECK(is_safetensors(bytes), origin, ": not a safetensors file (truncated, or another format)");
  const uint64_t n = header_length(bytes);
  const size_t data = 8 + n;
  NamedTensors out;
  for (const SafetensorsEntry& e : parse_header(bytes.substr(8, n), bytes.size() - data, origin)) {
    at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
    std::memcpy(t.data_ptr(), bytes.data() + data + e.begin, t.nbytes());
    out.emplace_back(e.name, t);
  }
  return out;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DDP_CHECK(fd_ >= 0, path, ": cannot open (", std::strerror(errno), ")");
  try {
    struct stat st {};
    DDP_CHECK(::fstat(fd_, &st) == 0, path, ": cannot stat (", std::strerror(errno), ")");
    const auto size = static_cast<uint64_t>(st.st_size);
    std::string head(8, '\0');
    DDP_CHECK(size >= 10 && read_fully_at(fd_, head.data(), 8, 0), path,
              ": not a safetensors file (truncated, or another format)");
    const uint64_t n = header_length(head);
    DDP_CHECK(n <= size - 8 && n <= kMaxHeaderBytes, path, ": not a safetensors file (a header of ", n,
              " bytes in a file of ", size, ")");
    std::string json(n, '\0');
    DDP_CHECK(read_fully_at(fd_, json.data(), n, 8), path, ": the safetensors header could not be read");
    DDP_CHECK(n > 0 && json[0] == '{', path, ": not a safetensors file (the header is not a JSON object)");
    data_start_ = 8 + n;
    entries_ = parse_header(json, size - data_start_, path);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() { ::close(fd_); }

at::Tensor SafetensorsFile::read(const SafetensorsEntry& e) const {
  at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
  read_into(e, t);
  return t;
}

void SafetensorsFile::read_into(const SafetensorsEntry& e, const at::Tensor& t) const {
  DDP_CHECK(t.is_cpu() && t.is_contiguous() && t.scalar_type() == e.dtype && t.nbytes() == e.end - e.begin,
            path_, ": tensor '", e.name, "' (", e.dtype, ", ", e.end - e.begin,
            " bytes) cannot be read into a tensor of ", t.scalar_type(), ", ", t.nbytes(), " bytes on ",
            t.device());
  errno = 0;
  DDP_CHECK(read_fully_at(fd_, t.data_ptr(), t.nbytes(), static_cast<int64_t>(data_start_ + e.begin)), path_,
            ": tensor '", e.name, "' could not be read (",
            errno != 0 ? std::strerror(errno) : "the file shrank", ")");
}

std::string safetensors_bytes(const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, at::Tensor>> sorted;
  for (const auto& [name, t] : tensors) sorted.emplace_back(name, t.detach().cpu().contiguous());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& [name, t] : sorted) {
    const char* dtype = dtype_name(t.scalar_type());
    DDP_CHECK(dtype != nullptr, "tensor '", name, "' has dtype ", t.scalar_type(),
              ", which safetensors cannot hold");
    header[name] = {
        {"dtype", dtype}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string json = json_text(header);
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + json.size() + offset);
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));  // little-endian
  out += json;
  for (const auto& [name, t] : sorted) out.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
  return out;
}

}  // namespace ddptrain
