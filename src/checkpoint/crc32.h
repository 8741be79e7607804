// The CRC-32 (zlib's polynomial) that a checkpoint's manifest records for each file.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ddptrain {

/// The CRC-32 of the first `n` bytes, of any length: zlib takes at most 4 GiB - 1 a call, so
/// the bytes go in 1 GiB pieces (a single call with the length cast to zlib's 32-bit uInt
/// covers only n mod 4 GiB bytes, which is what ddptrain recorded before 2026-12-03).
inline uint32_t crc32_of_prefix(const std::string& bytes, size_t n) {
  constexpr size_t kPiece = size_t{1} << 30;
  uLong crc = ::crc32(0L, Z_NULL, 0);
  for (size_t at = 0; at < n; at += kPiece) {
    const size_t len = std::min(kPiece, n - at);
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + at), static_cast<uInt>(len));
  }
  return static_cast<uint32_t>(crc);
}

inline uint32_t crc32_of(const std::string& bytes) { return crc32_of_prefix(bytes, bytes.size()); }

/// Whether `bytes` match a manifest's CRC-32: of the whole file, or, for a file of 4 GiB or
/// more, the CRC of its first (size mod 4 GiB) bytes that older ddptrain wrote.
inline bool crc32_matches(const std::string& bytes, uint32_t recorded) {
  if (crc32_of(bytes) == recorded) return true;
  const size_t older = bytes.size() & 0xFFFFFFFFu;
  return bytes.size() > 0xFFFFFFFFu && crc32_of_prefix(bytes, older) == recorded;
}

}  // namespace ddptrain
