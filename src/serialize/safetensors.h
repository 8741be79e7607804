// The safetensors format (Hugging Face): an 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, padded with spaces
// to a multiple of 8, then the raw little-endian tensor bytes, back to back in header order.
// Readers reject gaps and overlaps, so tensors are written in one sorted, contiguous run.
#pragma once

#include <map>
#include <string>

#include "serialize/python_pickle.h"

namespace ddptrain {

/// The bytes of a .safetensors file holding the tensors (CPU copies, contiguous).
std::string safetensors_bytes(const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata = {});

/// Whether bytes look like a safetensors file (a header length that fits, then '{').
bool is_safetensors(const std::string& bytes);

/// The tensors of a safetensors file, sorted by name (CPU). Error naming origin and what is
/// wrong (truncated, a dtype we do not read, offsets outside the data).
NamedTensors read_safetensors(const std::string& bytes, const std::string& origin);

}  // namespace ddptrain
