// The safetensors format (Hugging Face): an 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, padded with spaces
// to a multiple of 8, then the raw little-endian tensor bytes, back to back in header order.
// Readers reject gaps and overlaps, so tensors are written in one sorted, contiguous run.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "serialize/python_pickle.h"

namespace ddptrain {

/// One tensor of a safetensors header: its bytes are [begin, end) after the header.
struct SafetensorsEntry {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

/// A safetensors file on disk, read tensor by tensor: the header is read and checked at open
/// (every entry's dtype, shape, and offsets inside the file and matching the shape), a tensor's
/// bytes are read by pread straight into its storage when asked, so a loader holds no copy of
/// the file and reads at the disk's speed. Error naming the path for what is wrong.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  /// Sorted by name.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  at::Tensor read(const SafetensorsEntry& e) const;
  /// e's bytes into dest (CPU, contiguous, e's dtype and element count): no allocation.
  void read_into(const SafetensorsEntry& e, const at::Tensor& dest) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
};

/// The bytes of a .safetensors file holding the tensors (CPU copies, contiguous).
std::string safetensors_bytes(const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata = {});

/// Whether bytes look like a safetensors file (a header length that fits, then '{').
bool is_safetensors(const std::string& bytes);
/// Whether the file at path looks like one (read: its first 9 bytes); false when unreadable.
bool is_safetensors_file(const std::string& path);

/// The tensors of a safetensors file, sorted by name (CPU). Error naming origin and what is
/// wrong (truncated, a dtype we do not read, offsets outside the data).
NamedTensors read_safetensors(const std::string& bytes, const std::string& origin);

}  // namespace ddptrain
