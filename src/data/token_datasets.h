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
#pragma once

#include <string>

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

 private:
  at::Tensor tokens_;  // (n) uint8: this split's bytes
  int block_;
};

}  // namespace ddptrain
