// ddptrain: data-parallel training in C++ on LibTorch + c10d.
//
//   ddptrain train [flags]                       one process (or one rank under a launcher)
//   ddptrain launch --nproc_per_node N train ... N local workers (torchrun's contract)
//   ddptrain inspect sampler --dataset_len ...   print a rank's data order
//   ddptrain export --checkpoint DIR ...         weights as .pt, .safetensors or a Hugging Face folder
//   ddptrain plot RUN.jsonl ... -o run.svg       metrics as an SVG chart
//   ddptrain eval --checkpoint DIR               test loss and accuracy of a saved model
//
// main() only dispatches and maps errors to exit codes: 2 for usage errors, 1 otherwise.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "launch/launcher.h"
#include "tools/commands.h"
#include "tools/fatal_error.h"
#include "util/error.h"

namespace {

const char* const kUsage =
    "usage: ddptrain <command> [flags]\n"
    "commands:\n"
    "  train    train a model (single process, or one rank under launch/torchrun/Slurm/MPI)\n"
    "  launch   start N local workers: ddptrain launch --nproc_per_node N train [train flags]\n"
    "  inspect  ddptrain inspect sampler --dataset_len N --world_size W --rank R ...: a rank's sample "
    "indices\n"
    "           ddptrain inspect model [--model M ...]: layers, parameters, FLOPs per sample\n"
    "           ddptrain inspect loader [--dataset D ...]: how fast the loader alone delivers batches\n"
    "           ddptrain inspect hang DIR: which rank a failed job waited for, from its flight records\n"
    "  export   ddptrain export --checkpoint DIR --format pt|safetensors|hf --out PATH\n"
    "  plot     ddptrain plot METRICS.jsonl [MORE.jsonl ...] -o OUT.svg\n"
    "  eval     ddptrain eval --checkpoint DIR [train flags]: test loss and accuracy\n"
    "run `ddptrain <command> --help` for the flags of a command";

std::string self_exe(const char* argv0) {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) return std::string(buf, static_cast<size_t>(n));
  return argv0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fprintf(stderr, "%s\n", kUsage);
    return 2;
  }
  const std::string cmd = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  try {
    if (cmd == "train") return ddptrain::cmd_train(rest);
    if (cmd == "launch") return ddptrain::cmd_launch(rest, self_exe(argv[0]));
    if (cmd == "inspect") return ddptrain::cmd_inspect(rest);
    if (cmd == "export") return ddptrain::cmd_export(rest);
    if (cmd == "plot") return ddptrain::cmd_plot(rest);
    if (cmd == "eval") return ddptrain::cmd_eval(rest);
    if (cmd == "--help" || cmd == "-h" || cmd == "help") {
      std::printf("%s\n", kUsage);
      return 0;
    }
    throw ddptrain::UsageError("unknown command '" + cmd +
                               "'; use train, launch, eval, inspect, export or plot (see ddptrain --help)");
  } catch (...) {
    const ddptrain::FatalError f = ddptrain::describe_fatal(std::current_exception());
    return ddptrain::report_fatal(f.code, f.message, f.secondary);
  }
}
