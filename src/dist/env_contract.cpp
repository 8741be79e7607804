#include "dist/env_contract.h"

#include <cctype>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "util/env.h"
#include "util/error.h"

namespace ddptrain {
namespace {

constexpr long long kMaxRanks = 1 << 20;

// One launcher's answer: each field as that launcher's variable gives it (unset: nullopt).
struct LauncherAnswer {
  const char* launcher = "";
  const char* rank_name = "RANK";
  const char* world_name = "WORLD_SIZE";
  std::optional<long long> rank, world, local_rank, local_world;
  bool any() const { return rank || world; }
};

std::optional<long long> rank_var(const char* name) { return env::get_int(name, 0, kMaxRanks - 1); }
std::optional<long long> size_var(const char* name) { return env::get_int(name, 1, kMaxRanks); }

// Slurm's task list of the step ("4(x2),3"): (tasks, nodes) runs; UsageError naming `variable`.
std::vector<std::pair<long long, long long>> slurm_runs(const std::string& list, const char* variable) {
  const auto bad = [&](const std::string& why) {
    DDP_USAGE_CHECK(false, variable, "='", list, "': ", why,
                    " (Slurm writes counts separated by commas, N(xM) for M nodes of N: \"4(x2),3\"); set "
                    "LOCAL_WORLD_SIZE to the ranks on this node instead");
  };
  std::vector<std::pair<long long, long long>> runs;
  size_t at = 0;
  for (;;) {
    const size_t comma = list.find(',', at);
    const std::string entry = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    long long count = 0, times = 1;
    const size_t paren = entry.find("(x");
    if (entry.empty() || !std::isdigit(static_cast<unsigned char>(entry[0])) ||
        !env::parse_int(entry.substr(0, paren), &count) || count < 1 || count > kMaxRanks)
      bad("'" + entry + "' is not a task count from 1 to " + std::to_string(kMaxRanks));
    if (paren != std::string::npos &&
        (entry.back() != ')' || paren + 3 >= entry.size() ||
         !std::isdigit(static_cast<unsigned char>(entry[paren + 2])) ||
         !env::parse_int(entry.substr(paren + 2, entry.size() - paren - 3), &times) || times < 1 ||
         times > kMaxRanks))
      bad("'" + entry + "' is not N(xM)");
    runs.emplace_back(count, times);
    if (comma == std::string::npos) return runs;
    at = comma + 1;
  }
}

// The ranks on this node by the step's task list at SLURM_NODEID (without SLURM_NODEID, only
// a list of one node answers).
std::optional<long long> slurm_local_world() {
  const char* variable = "SLURM_STEP_TASKS_PER_NODE";  // the step's (the allocation's may differ)
  std::optional<std::string> list = env::get(variable);
  if (!list) list = env::get(variable = "SLURM_TASKS_PER_NODE");
  if (!list) return std::nullopt;
  std::optional<long long> node = env::get_int("SLURM_NODEID", 0, kMaxRanks);
  if (!node) {
    const auto runs = slurm_runs(*list, variable);
    DDP_USAGE_CHECK(runs.size() == 1 && runs[0].second == 1, variable, "='", *list,
                    "' lists several nodes but SLURM_NODEID is not set; run under srun, or set "
                    "LOCAL_RANK and LOCAL_WORLD_SIZE");
    node = 0;
  }
  return slurm_tasks_on_node(*list, static_cast<int>(*node), variable);
}

LauncherAnswer torchrun() {
  return {"torchrun",
          "RANK",
          "WORLD_SIZE",
          rank_var("RANK"),
          size_var("WORLD_SIZE"),
          rank_var("LOCAL_RANK"),
          size_var("LOCAL_WORLD_SIZE")};
}

LauncherAnswer open_mpi() {
  return {"Open MPI",
          "OMPI_COMM_WORLD_RANK",
          "OMPI_COMM_WORLD_SIZE",
          rank_var("OMPI_COMM_WORLD_RANK"),
          size_var("OMPI_COMM_WORLD_SIZE"),
          rank_var("OMPI_COMM_WORLD_LOCAL_RANK"),
          size_var("OMPI_COMM_WORLD_LOCAL_SIZE")};
}

LauncherAnswer slurm() {
  const char* world_name = "SLURM_STEP_NUM_TASKS";  // the step's (the allocation's may differ)
  std::optional<long long> world = size_var(world_name);
  if (!world) world = size_var(world_name = "SLURM_NTASKS");
  return {"Slurm",
          "SLURM_PROCID",
          world_name,
          rank_var("SLURM_PROCID"),
          world,
          rank_var("SLURM_LOCALID"),
          slurm_local_world()};
}

// MPICH's and Intel MPI's mpiexec (PMI_RANK, PMI_SIZE; Hydra's MPI_LOCALRANKID and
// MPI_LOCALNRANKS), or srun --mpi=pmi2, which sets PMI_RANK itself: where Slurm's step has
// this very rank and size, the step says where it runs.
LauncherAnswer pmi() {
  LauncherAnswer a{"PMI",
                   "PMI_RANK",
                   "PMI_SIZE",
                   rank_var("PMI_RANK"),
                   size_var("PMI_SIZE"),
                   rank_var("MPI_LOCALRANKID"),
                   size_var("MPI_LOCALNRANKS")};
  if (!a.local_rank && a.rank && env::get("SLURM_PROCID")) {
    const LauncherAnswer s = slurm();
    if (s.rank == a.rank && s.world == a.world) a.local_rank = s.local_rank, a.local_world = s.local_world;
  }
  return a;
}

// The launcher whose own rank variables are set, the first of torchrun (and ddptrain launch),
// Open MPI, PMI and Slurm: an MPI or torchrun job inside a Slurm allocation inherits SLURM_*
// variables of another step, never another launcher's rank.
LauncherAnswer this_launcher() {
  for (LauncherAnswer (*read)() : {torchrun, open_mpi, pmi, slurm}) {
    LauncherAnswer a = read();
    if (a.any()) return a;
  }
  return {};
}

// torchrun's wait between its stop signal and SIGKILL (TORCHELASTIC_MAX_RESTARTS set), else 0: torch
// 2.15's --shutdown_timeout in its environment spelling (PET_), then TORCH_ELASTIC_SHUTDOWN_TIMEOUT,
// then 30 s (the fixed wait of earlier torchruns, which read neither). Read leniently: a value only
// a warning uses, which another torch's torchrun may ignore, never stops a start.
int torchrun_stop_grace_s() {
  if (!env::get("TORCHELASTIC_MAX_RESTARTS")) return 0;
  for (const char* name : {"PET_SHUTDOWN_TIMEOUT", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"}) {
    const std::string v = env::get(name).value_or("");
    char* end = nullptr;
    const long seconds = std::strtol(v.c_str(), &end, 10);
    if (!v.empty() && *end == '\0' && seconds > 0 && seconds < (1 << 30)) return static_cast<int>(seconds);
  }
  return 30;
}

}  // namespace

const std::vector<const char*>& launcher_variables() {
  static const std::vector<const char*> names = {"RANK",
                                                 "WORLD_SIZE",
                                                 "LOCAL_RANK",
                                                 "LOCAL_WORLD_SIZE",
                                                 "MASTER_ADDR",
                                                 "MASTER_PORT",
                                                 "OMPI_COMM_WORLD_RANK",
                                                 "OMPI_COMM_WORLD_SIZE",
                                                 "OMPI_COMM_WORLD_LOCAL_RANK",
                                                 "OMPI_COMM_WORLD_LOCAL_SIZE",
                                                 "PMI_RANK",
                                                 "PMI_SIZE",
                                                 "MPI_LOCALRANKID",
                                                 "MPI_LOCALNRANKS",
                                                 "SLURM_PROCID",
                                                 "SLURM_STEP_NUM_TASKS",
                                                 "SLURM_NTASKS",
                                                 "SLURM_LOCALID",
                                                 "SLURM_STEP_TASKS_PER_NODE",
                                                 "SLURM_TASKS_PER_NODE",
                                                 "SLURM_NODEID",
                                                 "TORCHELASTIC_USE_AGENT_STORE",
                                                 "TORCHELASTIC_RESTART_COUNT",
                                                 "TORCHELASTIC_RUN_ID",
                                                 "DDPTRAIN_LAUNCH_DIR",
                                                 "DDPTRAIN_STOP_GRACE_S",
                                                 "TORCHELASTIC_MAX_RESTARTS",
                                                 "TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
                                                 "PET_SHUTDOWN_TIMEOUT"};
  return names;
}

int slurm_tasks_on_node(const std::string& tasks_per_node, int node, const char* variable) {
  DDP_USAGE_CHECK(node >= 0, "SLURM_NODEID=", node, " is negative; Slurm numbers a step's nodes from 0");
  long long seen = 0;  // nodes covered by the runs before this one
  for (const auto& [count, times] : slurm_runs(tasks_per_node, variable)) {
    if (node < seen + times) return static_cast<int>(count);
    seen += times;
  }
  DDP_USAGE_CHECK(false, variable, "='", tasks_per_node, "' lists ", seen, " node(s), and SLURM_NODEID is ",
                  node, "; set LOCAL_WORLD_SIZE to the ranks on this node instead");
  return 0;  // not reached
}

EnvContract read_env_contract() {
  EnvContract e;
  const LauncherAnswer a = this_launcher();
  if (!a.any()) return e;  // no contract at all: a single process
  DDP_USAGE_CHECK(a.world && a.rank, a.rank_name, " and ", a.world_name, " must be set together (found ",
                  a.rank ? a.rank_name : a.world_name, " only); set both, or neither for one process");
  DDP_USAGE_CHECK(*a.rank < *a.world, a.rank_name, "=", *a.rank, " must be < ", a.world_name, "=", *a.world,
                  "; ranks are numbered 0..", a.world_name, "-1");
  e.rank = static_cast<int>(*a.rank);
  e.world_size = static_cast<int>(*a.world);
  e.local_world_size = static_cast<int>(a.local_world.value_or(e.world_size));
  e.local_rank = static_cast<int>(a.local_rank.value_or(e.rank % e.local_world_size));
  DDP_USAGE_CHECK(e.local_world_size <= e.world_size, "LOCAL_WORLD_SIZE=", e.local_world_size,
                  " must be <= WORLD_SIZE=", e.world_size, " (", a.launcher, "'s variables)");
  DDP_USAGE_CHECK(e.local_rank < e.local_world_size, "LOCAL_RANK=", e.local_rank,
                  " must be < LOCAL_WORLD_SIZE=", e.local_world_size, " (", a.launcher, "'s variables)");
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
  e.job_id = env::get("TORCHELASTIC_RUN_ID").value_or("");      // Note [A torchrun job's restarts]
  if (e.job_id == "none") e.job_id.clear();                     // static rendezvous (and ddptrain launch)
  e.launch_dir = env::get("DDPTRAIN_LAUNCH_DIR").value_or("");  // Note [Stall seen by the launcher]
  e.stop_grace_s =
      static_cast<int>(env::get_int("DDPTRAIN_STOP_GRACE_S", 0, 1 << 30).value_or(torchrun_stop_grace_s()));
  return e;
}

bool is_loopback_address(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

}  // namespace ddptrain
