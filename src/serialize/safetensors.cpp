#include "serialize/safetensors.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <nlohmann/json.hpp>

#include "obs/logger.h"
#include "util/error.h"

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

}  // namespace

bool is_safetensors(const std::string& bytes) {
  return bytes.size() >= 10 && header_length(bytes) <= bytes.size() - 8 && bytes[8] == '{';
}

NamedTensors read_safetensors(const std::string& bytes, const std::string& origin) {
  DDP_CHECK(is_safetensors(bytes), origin, ": not a safetensors file (truncated, or another format)");
  const uint64_t n = header_length(bytes);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.substr(8, n));
  } catch (const nlohmann::json::exception& e) {
    throw Error(str(origin, ": the safetensors header is not JSON (", e.what(), ")"));
  }
  const size_t data = 8 + n;
  NamedTensors out;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    std::vector<int64_t> shape;
    std::vector<uint64_t> offsets;
    std::string dtype;
    try {
      shape = entry.at("shape").get<std::vector<int64_t>>();
      offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
      dtype = entry.at("dtype").get<std::string>();
    } catch (const nlohmann::json::exception& e) {
      throw Error(
          str(origin, ": tensor '", name, "' has no valid shape, data_offsets or dtype (", e.what(), ")"));
    }
    int64_t numel = 1;
    for (int64_t d : shape) {
      DDP_CHECK(d >= 0 && (d == 0 || numel <= (int64_t{1} << 40) / d), origin, ": tensor '", name,
                "' has a shape that is not one");
      numel *= d;
    }
    const uint64_t available = bytes.size() - data;
    DDP_CHECK(offsets.size() == 2 && offsets[0] <= offsets[1] && offsets[1] <= available, origin,
              ": tensor '", name, "' has data offsets outside the file");
    at::Tensor t = at::empty(shape, at::TensorOptions().dtype(dtype_of(dtype, origin, name)));
    DDP_CHECK(offsets[1] - offsets[0] == t.nbytes(), origin, ": tensor '", name,
              "' has data offsets that do not match its shape");
    std::memcpy(t.data_ptr(), bytes.data() + data + offsets[0], t.nbytes());
    out.emplace_back(name, t);
  }
  return out;
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
  std::string json = header.dump();
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
