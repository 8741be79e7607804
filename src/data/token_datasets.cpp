#include "data/token_datasets.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "util/error.h"
#include "util/fnv.h"

namespace ddptrain {

Example TokenSyntheticDataset::get(int64_t index) const {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(index));
  auto seq = at::randint(0, vocab_, {block_ + 1}, gen, at::kLong);
  return {seq.slice(0, 0, block_), seq.slice(0, 1, block_ + 1)};
}

TextDataset::TextDataset(const std::string& path, int block_size, bool train) : block_(block_size) {
  DDP_USAGE_CHECK(std::filesystem::is_regular_file(path), "'", path,
                  "' is not a file; give a text file (any bytes: they are the tokens)");
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  DDP_USAGE_CHECK(in.good() || in.eof(), "cannot read '", path, "'");
  const std::string bytes = ss.str();
  const auto n = static_cast<int64_t>(bytes.size());
  const int64_t split = n * 9 / 10;
  const int64_t begin = train ? 0 : split, end = train ? split : n;
  // One window needs block_size + 1 bytes (its input and the next-token targets).
  DDP_USAGE_CHECK(split >= block_size + 1 && n - split >= block_size + 1, "'", path, "' has ", n,
                  " bytes: too few for one window of block_size=", block_size,
                  " in both splits (90% train, 10% validation); it needs at least ", 10 * (block_size + 1),
                  " bytes, or a smaller block_size");
  tokens_ = at::empty({end - begin}, at::kByte);
  std::memcpy(tokens_.data_ptr(), bytes.data() + begin, static_cast<size_t>(end - begin));
}

uint64_t TextDataset::files_hash() const {
  if (files_hash_ == 0) {
    const at::Tensor bytes = tokens_.contiguous();
    files_hash_ = fnv1a(bytes.data_ptr(), static_cast<size_t>(bytes.numel()));
  }
  return files_hash_;
}

Example TextDataset::get(int64_t index) const {
  auto w = tokens_.slice(0, index * block_, index * block_ + block_ + 1).to(at::kLong);
  return {w.slice(0, 0, block_), w.slice(0, 1, block_ + 1)};
}

}  // namespace ddptrain
