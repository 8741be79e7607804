// The launch command line (launch/launcher.h): its flags, where they end and the worker
// command begins, and their checks.
#include <algorithm>
#include <cstdio>

#include "dist/env_contract.h"
#include "launch/launcher.h"
#include "util/error.h"

namespace ddptrain {

const char* const kLaunchUsage =
    "usage: ddptrain launch --nproc_per_node N [--nnodes M --node_rank R --master_addr A\n"
    "                       --master_port P] train [train flags]\n"
    "       ddptrain launch [launch flags] PROGRAM [ARGS...]\n"
    "Starts N workers on this node with the torchrun environment contract: ddptrain's own\n"
    "commands (train, eval), or any program (as torchrun --no-python does), e.g. your own\n"
    "binary built against ddptrain.";

std::vector<Flag> launch_flags(LaunchOptions& o) {
  return {
      bind_flag("nproc_per_node", &o.nproc_per_node, "workers on this node"),
      bind_flag("nnodes", &o.nnodes, "nodes in the job"),
      bind_flag("node_rank", &o.node_rank, "this node's index in [0, nnodes)"),
      bind_flag("master_addr", &o.master_addr, "address of node 0 (rank 0 serves the TCPStore)"),
      bind_flag("master_port", &o.master_port, "TCP port of the rendezvous on node 0"),
      bind_flag("kill_grace_s", &o.kill_grace_s,
                "seconds between SIGTERM and SIGKILL on teardown after a worker failed"),
      bind_flag("signal_grace_s", &o.signal_grace_s,
                "seconds the workers get to finish their step and save after a SIGINT/SIGTERM this "
                "launcher forwards, before SIGKILL (a second signal, a second or more after the first: "
                "SIGKILL at once)"),
      bind_flag("max_restarts", &o.max_restarts,
                "restart the workers this often after a failure (they resume from the newest checkpoint; "
                "one node only: torchrun restarts a multi-node job)"),
      bind_flag(
          "stall_s", &o.stall_s,
          "a rank waiting this many seconds in one collective is a hang: every rank writes its flight "
          "record, "
          "the launcher prints which rank is behind and stops the workers (0: off; longer than any start-up, "
          "evaluation or checkpoint write)"),
  };
}

size_t launch_flags_end(const std::vector<std::string>& args) {
  size_t i = 0;
  while (i < args.size() && args[i].rfind("-", 0) == 0) {
    const bool inline_value = args[i].find('=') != std::string::npos;
    const bool help = args[i] == "--help" || args[i] == "-h";
    i += inline_value || help ? 1 : 2;  // every launch flag takes a value
  }
  return std::min(i, args.size());
}

bool is_ddptrain_command(const std::string& name) { return name == "train" || name == "eval"; }

std::vector<std::string> parse_launch_args(const std::vector<std::string>& args, LaunchOptions* opts) {
  const size_t split = launch_flags_end(args);
  DDP_USAGE_CHECK(split < args.size(), "launch needs the worker command: add `train [train flags]` ",
                  "(or `eval --checkpoint DIR`, or any PROGRAM [ARGS...]) after the launch flags");
  auto table = launch_flags(*opts);
  std::vector<std::string> positional;
  try {
    positional = parse_flags(table, {args.begin(), args.begin() + static_cast<long>(split)});
  } catch (const UsageError& e) {  // most often a worker's flag before the command
    if (std::string(e.what()).rfind("unknown", 0) != 0) throw;
    throw UsageError(str(e.what(),
                         " (launch's flags come before the worker command and the command's own after ",
                         "it: ddptrain launch --nproc_per_node 2 train --epochs 1)"));
  }
  DDP_USAGE_CHECK(positional.empty(), "unexpected argument '", positional.empty() ? "" : positional[0],
                  "' before `train`; see ddptrain launch --help");
  DDP_USAGE_CHECK(opts->nproc_per_node >= 1, "--nproc_per_node=", opts->nproc_per_node,
                  " must be >= 1; pass e.g. --nproc_per_node 2");
  DDP_USAGE_CHECK(opts->nnodes >= 1, "--nnodes=", opts->nnodes, " must be >= 1");
  DDP_USAGE_CHECK(opts->node_rank >= 0 && opts->node_rank < opts->nnodes, "--node_rank=", opts->node_rank,
                  " must be in [0, ", opts->nnodes, "); number nodes from 0");
  DDP_USAGE_CHECK(opts->master_port >= 1 && opts->master_port <= 65535, "--master_port=", opts->master_port,
                  " must be a TCP port in [1, 65535]");
  DDP_USAGE_CHECK(opts->max_restarts >= 0, "--max_restarts=", opts->max_restarts, " must be >= 0");
  const std::string& addr = opts->master_addr;
  if (opts->nnodes > 1 && is_loopback_address(addr))
    std::fprintf(stderr,
                 "launch: warning: --master_addr %s with --nnodes %d: only nodes on this machine reach it "
                 "(rank 0's store and Gloo listen there); give node 0's address\n",
                 addr.c_str(), opts->nnodes);
  DDP_USAGE_CHECK(
      opts->max_restarts == 0 || opts->nnodes == 1, "--max_restarts=", opts->max_restarts,
      " with --nnodes=", opts->nnodes, ": each node's launcher would restart its own workers ",
      "alone, and a restarted node would meet the other nodes' old group; restart a multi-node ",
      "job with torchrun's rendezvous (docs/running.md, \"Elastic\"), or pass --max_restarts 0 and ",
      "restart the whole job");
  DDP_USAGE_CHECK(opts->kill_grace_s >= 0, "--kill_grace_s=", opts->kill_grace_s, " must be >= 0");
  DDP_USAGE_CHECK(opts->signal_grace_s >= 0, "--signal_grace_s=", opts->signal_grace_s, " must be >= 0");
  DDP_USAGE_CHECK(opts->stall_s >= 0, "--stall_s=", opts->stall_s, " must be >= 0 (0: off)");
  return {args.begin() + static_cast<long>(split), args.end()};
}

}  // namespace ddptrain
