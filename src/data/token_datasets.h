// Token datasets for language models: each sample is a window of block_size tokens (input,
// int64) and the same window shifted by one (target: the next token at every position).
//  - TokenSyntheticDataset (--dataset tokens): sample i is randint(0, vocab, block_size + 1)
//    from a CPU generator seeded with i: deterministic on any rank, in any order, and
//    unlearnable (a throughput workload; its loss stays near ln(vocab)).
//  - TextDataset (--dataset text --data_path FILE): byte-level tokens (vocab 256) of any
//    file. The first 90% of the bytes are the train split, the last 10% the validation split;
//    each split is cut into non-overlapping windows (window i starts at byte i·block_size),
//    so an epoch reads every byte of its split once and the distributed sampler shuffles the
//    windows. UsageError naming the file when it is missing or too short for one window per
//    split.
//  - TokenShardDataset (--dataset token_shards --data_path GLOB): pre-tokenized files, read
//    where they lie (never whole), as nanoGPT's prepare.py writes them (train.bin: raw
//    little-endian uint16) or llm.c's (a header of 256 int32: magic 20240520, version 1,
//    token count, then uint16 tokens; magic 20240801, version 7: uint32 tokens, for
//    vocabularies over 65,536). Each file is cut into windows of block_size + 1 tokens at stride
//    block_size (window i of a file starts at its token i·block_size; a window does not cross
//    files, and a file's last (n - 1) mod block_size tokens are in none), so an epoch reads
//    each token once and the distributed sampler shuffles the windows of all files.
#pragma once

#include <string>
#include <vector>

#include "data/datasets.h"

namespace ddptrain {

class TokenSyntheticDataset : public Dataset {
 public:
  TokenSyntheticDataset(int64_t size, int block_size, int vocab_size)
      : size_(size), block_(block_size), vocab_(vocab_size) {}
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;
  DatasetShape shape() const override { return {1, 1, block_, vocab_, block_}; }

 private:
  int64_t size_;
  int block_, vocab_;
};

class TextDataset : public Dataset {
 public:
  /// train: the first 90% of the file's bytes; otherwise the last 10%.
  TextDataset(const std::string& path, int block_size, bool train);
  int64_t size() const override { return (tokens_.numel() - 1) / block_; }
  Example get(int64_t index) const override;
  DatasetShape shape() const override { return {1, 1, block_, 256, block_}; }
  /// This split's bytes (read once, then kept).
  uint64_t files_hash() const override;

 private:
  at::Tensor tokens_;                // (n) uint8: this split's bytes
  mutable uint64_t files_hash_ = 0;  // 0: not computed yet (the main thread's alone)
  int block_;
};

/// The files a pattern names (glob(3), sorted by name; a plain path names itself).
/// UsageError naming the pattern when it matches nothing.
std::vector<std::string> token_shard_files(const std::string& pattern);

class TokenShardDataset : public Dataset {
 public:
  /// UsageError naming the file for one that is neither format (no llm.c header, and not a
  /// .bin of whole uint16 tokens), a header whose version or token count does not fit the
  /// file, too few tokens for one window in all files, or a token not below vocab_size (the
  /// model's) among each file's first 65,536 (get() checks the rest as it reads them).
  TokenShardDataset(const std::string& pattern, int block_size, int vocab_size);
  ~TokenShardDataset() override;
  TokenShardDataset(const TokenShardDataset&) = delete;
  TokenShardDataset& operator=(const TokenShardDataset&) = delete;
  int64_t size() const override { return starts_.back(); }
  Example get(int64_t index) const override;
  DatasetShape shape() const override { return {1, 1, block_, vocab_, block_}; }
  int64_t tokens() const { return tokens_; }  // in all files, windowed or not
  size_t num_files() const { return shards_.size(); }
  /// The files' names, widths and token counts, in order.
  uint64_t files_hash() const override;

 private:
  struct Shard {
    std::string path;
    int fd = -1;
    int width = 2;       // bytes a token
    int64_t offset = 0;  // of the first token
    int64_t tokens = 0;
  };
  void add_shard(const std::string& path);
  void read_tokens(const Shard& s, int64_t first, int64_t n, int64_t* out) const;
  void close_all();
  std::vector<Shard> shards_;
  std::vector<int64_t> starts_;  // the first window of each file; back(): all windows
  int block_, vocab_;
  int64_t tokens_ = 0;
};

}  // namespace ddptrain
