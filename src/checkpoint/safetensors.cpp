#include "checkpoint/safetensors.h"

#include <algorithm>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace ddptrain {
namespace {

const char* dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "F32";
    case at::kDouble: return "F64";
    case at::kHalf: return "F16";
    case at::kBFloat16: return "BF16";
    case at::kLong: return "I64";
    case at::kInt: return "I32";
    case at::kShort: return "I16";
    case at::kChar: return "I8";
    case at::kByte: return "U8";
    case at::kBool: return "BOOL";
    default: return nullptr;
  }
}

}  // namespace

std::string safetensors_bytes(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, at::Tensor>> sorted;
  for (const auto& [name, t] : tensors) sorted.emplace_back(name, t.detach().cpu().contiguous());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& [name, t] : sorted) {
    const char* dtype = dtype_name(t.scalar_type());
    DDP_CHECK(dtype != nullptr, "tensor '", name, "' has dtype ", t.scalar_type(), ", which safetensors cannot hold");
    header[name] = {{"dtype", dtype}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + t.nbytes()}}};
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
