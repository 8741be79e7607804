// `ddptrain inspect sampler ...`: prints a rank's indices, space separated, on one line, so
// users can debug their data order (identical to PyTorch's DistributedSampler).
#include <cstdio>

#include "config/flag_table.h"
#include "data/distributed_sampler.h"
#include "tools/commands.h"
#include "util/error.h"

namespace ddptrain {

int cmd_inspect(const std::vector<std::string>& args) {
  const char* usage =
      "usage: ddptrain inspect sampler --dataset_len N --world_size W --rank R --seed S --epoch E\n"
      "                                [--no-shuffle] [--drop_last]";
  long long len = 0, world = 1, rank = 0, seed = 0, epoch = 0;
  bool shuffle = true, drop_last = false;
  std::vector<Flag> table = {
      bind_flag("dataset_len", &len, "samples in the dataset"),
      bind_flag("world_size", &world, "number of ranks"),
      bind_flag("rank", &rank, "the rank to show"),
      bind_flag("seed", &seed, "sampler seed"),
      bind_flag("epoch", &epoch, "the epoch given to set_epoch"),
      bind_flag("shuffle", &shuffle, "permute the indices"),
      bind_flag("drop_last", &drop_last, "drop the tail instead of padding"),
  };
  if (wants_help(args)) {
    std::printf("%s", flags_help(table, usage).c_str());
    return 0;
  }
  auto positional = parse_flags(table, args);
  DDP_USAGE_CHECK(positional.size() == 1 && positional[0] == "sampler",
                  "inspect needs what to inspect: `ddptrain inspect sampler --dataset_len N ...`");
  DDP_USAGE_CHECK(len >= 0, "--dataset_len=", len, " must be >= 0");
  DDP_USAGE_CHECK(world >= 1, "--world_size=", world, " must be >= 1");
  DDP_USAGE_CHECK(rank >= 0 && rank < world, "--rank=", rank, " must be in [0, ", world, ")");
  DDP_USAGE_CHECK(seed >= 0, "--seed=", seed, " must be >= 0");
  DDP_USAGE_CHECK(epoch >= 0, "--epoch=", epoch, " must be >= 0");
  DistributedSampler s({len, static_cast<int>(world), static_cast<int>(rank), shuffle,
                        static_cast<uint64_t>(seed), drop_last});
  s.set_epoch(epoch);
  std::string line;
  for (int64_t i : s.indices()) {
    if (!line.empty()) line += ' ';
    line += std::to_string(i);
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace ddptrain
