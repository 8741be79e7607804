#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "data/token_datasets.h"
#include "util/error.h"
#include "util/files.h"
#include "util/fnv.h"
#include "util/strings.h"

namespace ddptrain {
namespace {

// llm.c's token files (dev/data/data_common.py): 256 little-endian int32s, then the tokens.
constexpr int64_t kHeaderBytes = 256 * 4;
constexpr int32_t kMagicU16 = 20240520, kVersionU16 = 1;  // GPT-2's: uint16 tokens
constexpr int32_t kMagicU32 = 20240801, kVersionU32 = 7;  // Llama 3's: uint32 tokens
constexpr int64_t kTokensCheckedAtOpen = 1 << 16;         // of each file, against the vocabulary

int32_t le32(const unsigned char* b) {
  return static_cast<int32_t>(static_cast<uint32_t>(b[0]) | static_cast<uint32_t>(b[1]) << 8 |
                              static_cast<uint32_t>(b[2]) << 16 | static_cast<uint32_t>(b[3]) << 24);
}

// numpy's default int64, or uint32, written raw (np.array(ids).tofile) reads as uint16 tokens
// with zeros between them: every id below the vocabulary, so nothing else stops a run on mostly
// zeros. A file of real uint16 text has no such pattern over its first tokens.
void refuse_wider_raw_tokens(const std::vector<int64_t>& head, const std::string& path) {
  if (head.size() < 64) return;
  bool odd_all_zero = true, even_any = false;
  for (size_t i = 0; i < head.size(); ++i) {
    if (i % 2 != 0 && head[i] != 0) odd_all_zero = false;
    if (i % 2 == 0 && head[i] != 0) even_any = true;
  }
  DDP_USAGE_CHECK(!(odd_all_zero && even_any), "'", path,
                  "' looks like 4- or 8-byte tokens written raw (every ", "second 2-byte value of its first ",
                  head.size(), " is 0: numpy's default int64, or uint32): ",
                  "write them as uint16 (np.array(ids, np.uint16).tofile), or uint32 under llm.c's header");
}

}  // namespace

std::vector<std::string> token_shard_files(const std::string& pattern) {
  return files_matching(pattern, "token file", "data/fineweb_train_*.bin");
}

// Opens the file and reads its format; the file is in shards_ (so close_all closes it) before
// any check can throw.
void TokenShardDataset::add_shard(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DDP_USAGE_CHECK(fd >= 0, "cannot open '", path, "': ", std::strerror(errno),
                  errno == EMFILE ? " (too many files open: raise `ulimit -n`)" : "");
  shards_.push_back({path, fd});
  Shard& s = shards_.back();
  struct stat st {};
  DDP_USAGE_CHECK(::fstat(s.fd, &st) == 0 && S_ISREG(st.st_mode), "'", path, "' is not a regular file");
  const int64_t bytes = st.st_size;
  unsigned char head[12] = {};
  const bool has_head = bytes >= kHeaderBytes && read_fully_at(s.fd, head, sizeof head, 0);
  const int32_t magic = has_head ? le32(head) : 0;
  if (magic == kMagicU16 || magic == kMagicU32) {
    const int32_t version = le32(head + 4), count = le32(head + 8);
    const int32_t want = magic == kMagicU16 ? kVersionU16 : kVersionU32;
    s.width = magic == kMagicU16 ? 2 : 4;
    DDP_USAGE_CHECK(version == want, "'", path, "' has llm.c's magic ", magic, " but version ", version,
                    "; ddptrain reads version ", want, " (", s.width == 2 ? "uint16" : "uint32", " tokens)");
    DDP_USAGE_CHECK(count >= 0 && bytes == kHeaderBytes + int64_t{count} * s.width, "'", path,
                    "': its llm.c header says ", count, " tokens (", int64_t{count} * s.width,
                    " bytes after the 1024-byte header), but the file has ", bytes - kHeaderBytes,
                    " (truncated or still being written?)");
    s.offset = kHeaderBytes;
    s.tokens = count;
    return;
  }
  DDP_USAGE_CHECK(std::filesystem::path(path).extension() == ".bin", "'", path,
                  "' is not a token file: no llm.c header (its first int32 is not 20240520 or 20240801), "
                  "and raw uint16 tokens (nanoGPT's) are read from .bin files only");
  DDP_USAGE_CHECK(bytes % 2 == 0, "'", path, "' has ", bytes,
                  " bytes: not raw uint16 tokens (nanoGPT's .bin: 2 bytes a token) and no llm.c header");
  s.width = 2;
  s.tokens = bytes / 2;
}

TokenShardDataset::TokenShardDataset(const std::string& pattern, int block_size, int vocab_size)
    : block_(block_size), vocab_(vocab_size) {
  DDP_USAGE_CHECK(block_size > 0 && vocab_size > 0,
                  "token shards need a block_size and vocab_size > 0 (given ", block_size, " and ",
                  vocab_size, ")");
  starts_.push_back(0);
  try {
    for (const std::string& file : token_shard_files(pattern)) {
      add_shard(file);
      // numpy's uint16 wraps larger ids silently: the vocabulary check below cannot see them.
      DDP_USAGE_CHECK(shards_.back().width == 4 || vocab_size <= 65536, "'", file,
                      "' holds 2-byte tokens (ids below 65,536) but the model's vocab_size is ", vocab_size,
                      ": a larger tokenizer's ids do not fit 2 bytes (numpy's uint16 wraps them); write "
                      "uint32 tokens under llm.c's header (magic 20240801, version 7), or train a model of "
                      "the file's tokenizer");
      const int64_t t = shards_.back().tokens;
      // A file of another tokenizer fails here, not hours into the epoch: its first tokens.
      std::vector<int64_t> head(static_cast<size_t>(std::min<int64_t>(t, kTokensCheckedAtOpen)));
      read_tokens(shards_.back(), 0, static_cast<int64_t>(head.size()), head.data());
      if (shards_.back().offset == 0) refuse_wider_raw_tokens(head, file);
      starts_.push_back(starts_.back() + (t > block_ ? (t - 1) / block_ : 0));
      tokens_ += t;
    }
    DDP_USAGE_CHECK(size() > 0, "'", pattern, "' holds ", tokens_, " tokens in ", shards_.size(),
                    shards_.size() == 1 ? " file" : " files",
                    ": too few for one window of block_size + 1 = ", block_ + 1,
                    " tokens (a window does not cross files); give more tokens or a smaller block_size");
  } catch (...) {  // no destructor runs for a constructor that throws
    close_all();
    throw;
  }
}

uint64_t TokenShardDataset::files_hash() const {
  uint64_t h = kFnvOffset;
  for (const Shard& s : shards_)
    h = fnv1a(str(std::filesystem::path(s.path).filename().string(), ' ', s.width, ' ', s.tokens, '\n'), h);
  return h;
}

void TokenShardDataset::close_all() {
  for (Shard& s : shards_)
    if (s.fd >= 0) ::close(s.fd), s.fd = -1;
}

TokenShardDataset::~TokenShardDataset() { close_all(); }

// Note [Token shards are read, not mapped]: a window is one pread of its (block_size + 1)
// tokens. The page cache keeps what the kernel wants to; the process's resident set holds only
// the windows in flight, whatever the shards' total. (Pages of a mapping that a run touches
// count in its resident set until unmapped: a shuffled epoch over a mapped 30 GB shard set
// would grow the run towards 30 GB.)
Example TokenShardDataset::get(int64_t index) const {
  DDP_CHECK(index >= 0 && index < size(), "token window ", index, " of ", size());
  const auto next = std::upper_bound(starts_.begin(), starts_.end(), index);
  const Shard& s = shards_[static_cast<size_t>(next - starts_.begin() - 1)];
  const int64_t first = (index - *(next - 1)) * block_, n = block_ + 1;
  at::Tensor w = at::empty({n}, at::kLong);
  read_tokens(s, first, n, w.data_ptr<int64_t>());
  return {w.slice(0, 0, block_), w.slice(0, 1, n)};
}

// Tokens [first, first + n) of a file as int64, each checked against the vocabulary. The raw
// tokens are read into the front of `out`, then widened from the last one down, so that each
// write lands past every token still to be read (8·i >= width·(i + 1) for i >= 1).
void TokenShardDataset::read_tokens(const Shard& s, int64_t first, int64_t n, int64_t* out) const {
  auto* bytes = reinterpret_cast<unsigned char*>(out);
  DDP_USAGE_CHECK(read_fully_at(s.fd, bytes, static_cast<size_t>(n * s.width), s.offset + first * s.width),
                  "'", s.path, "': cannot read tokens ", first, " to ", first + n,
                  " (was it truncated while training?)");
  int64_t largest = 0;
  for (int64_t i = n - 1; i >= 0; --i) {
    const unsigned char* b = bytes + i * s.width;
    const int64_t t = s.width == 2 ? int64_t{b[0]} | int64_t{b[1]} << 8 : static_cast<uint32_t>(le32(b));
    out[i] = t;
    largest = std::max(largest, t);
  }
  if (largest < vocab_) return;
  int64_t at = 0;
  while (out[at] < vocab_) ++at;
  throw UsageError(str("'", s.path, "': token ", first + at, " is ", out[at],
                       ", not below the model's vocab_size ", vocab_,
                       "; train a model with a vocabulary of at least ", largest + 1,
                       " (GPT-2's tokenizer: 50257), or check which tokenizer wrote the file"));
}

}  // namespace ddptrain
