// The safetensors format (Hugging Face): an 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, padded with spaces
// to a multiple of 8, then the raw little-endian tensor bytes, back to back in header order.
// Readers reject gaps and overlaps, so tensors are written in one sorted, contiguous run.
#pragma once

#include <map>
#include <string>

#include "checkpoint/python_pickle.h"

namespace ddptrain {

/// The bytes of a .safetensors file holding the tensors (CPU copies, contiguous).
std::string safetensors_bytes(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata = {});

}  // namespace ddptrain
