// `ddptrain inspect sampler ...`: prints a rank's indices, space separated, on one line, so
// users can debug their data order (identical to PyTorch's DistributedSampler).
// `ddptrain inspect model ...`: the layer table, parameter count and FLOPs per sample.
#include <cstdio>

#include "config/flag_table.h"
#include "data/distributed_sampler.h"
#include "models/mini_resnet.h"
#include "tools/commands.h"
#include "util/error.h"

namespace ddptrain {

namespace {

int inspect_model(const std::vector<std::string>& args) {
  const char* usage = "usage: ddptrain inspect model [--width W --image_size S --in_channels C --num_classes N]";
  double width = 1.0;
  long long image = 32, channels = 3, classes = 10;
  std::vector<Flag> table = {
      bind_flag("width", &width, "channel multiplier"),
      bind_flag("image_size", &image, "input height and width"),
      bind_flag("in_channels", &channels, "input channels"),
      bind_flag("num_classes", &classes, "classes"),
  };
  if (wants_help(args)) {
    std::printf("%s", flags_help(table, usage).c_str());
    return 0;
  }
  auto positional = parse_flags(table, args);
  DDP_USAGE_CHECK(positional.size() == 1, usage);
  DDP_USAGE_CHECK(width > 0 && width <= 64, "--width=", width, " must be in (0, 64]");
  DDP_USAGE_CHECK(image >= 4, "--image_size=", image, " must be >= 4");
  DDP_USAGE_CHECK(channels >= 1 && classes >= 1, "--in_channels and --num_classes must be >= 1");
  MiniResNet model(MiniResNetOptions{channels, classes, width});
  std::printf("%-22s %-12s %-16s %12s %14s\n", "layer", "kind", "output", "params", "fwd MFLOP");
  int64_t fwd = 0;
  for (const auto& r : model->layer_table(image, image)) {
    std::string shape;
    for (size_t i = 0; i < r.out_shape.size(); ++i) shape += (i ? "x" : "") + std::to_string(r.out_shape[i]);
    std::printf("%-22s %-12s %-16s %12lld %14.3f\n", r.name.c_str(), r.kind.c_str(), shape.c_str(),
                static_cast<long long>(r.params), static_cast<double>(r.forward_flops) / 1e6);
    fwd += r.forward_flops;
  }
  std::printf("parameters: %lld\n", static_cast<long long>(count_parameters(*model)));
  std::printf("forward FLOPs per sample: %lld (%.4f GFLOP)\n", static_cast<long long>(fwd), static_cast<double>(fwd) / 1e9);
  std::printf("training FLOPs per sample (3 x forward): %lld (%.4f GFLOP)\n",
              static_cast<long long>(model->train_flops_per_sample(image, image)),
              static_cast<double>(model->train_flops_per_sample(image, image)) / 1e9);
  return 0;
}

}  // namespace

int cmd_inspect(const std::vector<std::string>& args) {
  if (!args.empty() && args[0] == "model") return inspect_model(args);
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
                  "inspect needs what to inspect: `ddptrain inspect sampler --dataset_len N ...` or "
                  "`ddptrain inspect model --width W ...`");
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
