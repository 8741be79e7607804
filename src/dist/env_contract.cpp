#include "dist/env_contract.h"

#include <initializer_list>
#include <optional>
#include <utility>
#include <vector>

#include "util/env.h"
#include "util/error.h"

namespace ddptrain {
namespace {

constexpr long long kMaxRanks = 1 << 20;

// The first variable of the list that is set, read as an integer in [min, max].
std::optional<long long> first_set(std::initializer_list<const char*> names, long long min, long long max) {
  for (const char* n : names)
    if (auto v = env::get_int(n, min, max)) return v;
  return std::nullopt;
}

// This node's entry of Slurm's SLURM_TASKS_PER_NODE (at SLURM_NODEID, node 0 without it).
std::optional<long long> slurm_local_size() {
  const auto spec = env::get("SLURM_TASKS_PER_NODE");
  if (!spec) return std::nullopt;
  const int node = static_cast<int>(env::get_int("SLURM_NODEID", 0, kMaxRanks).value_or(0));
  return slurm_tasks_on_node(*spec, node);
}

}  // namespace

int slurm_tasks_on_node(const std::string& tasks_per_node, int node) {
  const auto bad = [&](const std::string& why) {
    DDP_USAGE_CHECK(false, "SLURM_TASKS_PER_NODE='", tasks_per_node, "': ", why,
                    " (Slurm writes counts separated by commas, N(xM) for M nodes of N: \"4(x2),3\"); set "
                    "LOCAL_WORLD_SIZE to the ranks on this node instead");
  };
  std::vector<std::pair<long long, long long>> runs;  // (tasks, nodes), the whole list checked
  size_t at = 0;
  for (;;) {
    const size_t comma = tasks_per_node.find(',', at);
    const std::string entry =
        tasks_per_node.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    long long count = 0, times = 1;
    const size_t paren = entry.find("(x");
    if (!env::parse_int(entry.substr(0, paren), &count) || count < 1)
      bad("'" + entry + "' is not a task count");
    if (paren != std::string::npos &&
        (entry.back() != ')' || !env::parse_int(entry.substr(paren + 2, entry.size() - paren - 3), &times) ||
         times < 1))
      bad("'" + entry + "' is not N(xM)");
    runs.emplace_back(count, times);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  long long seen = 0;  // nodes covered by the runs before this one
  for (const auto& [count, times] : runs) {
    if (node < seen + times) return static_cast<int>(count);
    seen += times;
  }
  bad("it lists " + std::to_string(seen) + " node(s), and SLURM_NODEID is " + std::to_string(node));
  return 0;  // not reached: bad() throws
}

EnvContract read_env_contract() {
  EnvContract e;
  auto world = first_set({"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, 1, kMaxRanks);
  auto rank = first_set({"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}, 0, kMaxRanks);
  if (!world && !rank) return e;  // no contract at all: a single process
  DDP_USAGE_CHECK(world && rank, "RANK and WORLD_SIZE must be set together (found ",
                  rank ? "RANK" : "WORLD_SIZE", " only); set both, or neither for one process");
  DDP_USAGE_CHECK(*rank < *world, "RANK=", *rank, " must be < WORLD_SIZE=", *world,
                  "; ranks are numbered 0..WORLD_SIZE-1");
  e.rank = static_cast<int>(*rank);
  e.world_size = static_cast<int>(*world);
  std::optional<long long> local = first_set({"LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE"}, 1, kMaxRanks);
  if (!local) local = slurm_local_size();
  if (!local) local = first_set({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}, 1, kMaxRanks);
  e.local_world_size = static_cast<int>(local.value_or(e.world_size));
  e.local_rank = static_cast<int>(
      first_set({"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}, 0,
                kMaxRanks)
          .value_or(e.rank % e.local_world_size));
  DDP_USAGE_CHECK(e.local_rank < e.local_world_size, "LOCAL_RANK=", e.local_rank,
                  " must be < LOCAL_WORLD_SIZE=", e.local_world_size);
  if (e.world_size > 1) {
    auto addr = env::get("MASTER_ADDR");
    DDP_USAGE_CHECK(addr.has_value(), "MASTER_ADDR is not set but WORLD_SIZE=", e.world_size,
                    "; set MASTER_ADDR to the address of rank 0's host (e.g. 127.0.0.1)");
    e.master_addr = *addr;
    auto port = env::get_int("MASTER_PORT", 1, 65535);
    DDP_USAGE_CHECK(port.has_value(), "MASTER_PORT is not set but WORLD_SIZE=", e.world_size,
                    "; set MASTER_PORT to a free TCP port on rank 0's host (e.g. 29500)");
    e.master_port = static_cast<int>(*port);
  }
  e.use_agent_store = env::get("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
  e.restart_count = static_cast<int>(env::get_int("TORCHELASTIC_RESTART_COUNT", 0, 1 << 30).value_or(0));
  e.launch_dir = env::get("DDPTRAIN_LAUNCH_DIR").value_or("");  // Note [Stall seen by the launcher]
  return e;
}

}  // namespace ddptrain
