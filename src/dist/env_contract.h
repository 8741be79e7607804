// Who this process is in the job, read from its launcher's environment: torchrun's contract
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), or where that is
// absent Slurm's (srun), Open MPI's (mpirun) or a PMI launcher's (MPICH's and Intel MPI's
// mpiexec): Note [Launchers' environments].
#pragma once

#include <string>

namespace ddptrain {

/// Note [Launchers' environments]
/// Each field comes from the first variable of its list that is set: torchrun's name first (so
/// torchrun or `ddptrain launch` inside a Slurm or MPI job wins), then Slurm's, Open MPI's and
/// PMI's. Rank: RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK. World size: WORLD_SIZE,
/// SLURM_NTASKS, OMPI_COMM_WORLD_SIZE, PMI_SIZE. Ranks on this node: LOCAL_WORLD_SIZE,
/// SLURM_NTASKS_PER_NODE (set only with --ntasks-per-node), this node's entry of
/// SLURM_TASKS_PER_NODE (always set by srun, as "4(x2),3": node SLURM_NODEID's count),
/// OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS (MPICH's Hydra); else the world (one node).
/// Local rank: LOCAL_RANK, SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID; else
/// rank modulo the local size. Where the world has more than one rank MASTER_ADDR and
/// MASTER_PORT are needed whatever the launcher (the TCPStore rendezvous: Slurm and MPI
/// jobs export them in their batch script). A malformed or inconsistent value is a UsageError
/// naming the variable and how to fix it.
struct EnvContract {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool use_agent_store = false;  // torchrun's agent already serves the TCPStore
  int restart_count = 0;         // TORCHELASTIC_RESTART_COUNT, keys the store prefix
  std::string launch_dir;        // DDPTRAIN_LAUNCH_DIR: ddptrain launch watches for stalls there
};

/// Reads and validates the environment; UsageError naming the variable when invalid.
EnvContract read_env_contract();

/// The tasks Slurm runs on node `node` by SLURM_TASKS_PER_NODE's notation (counts separated by
/// commas, "N(xM)" for M nodes of N: "4(x2),3" is 4, 4, 3). UsageError when malformed or when
/// the list has no such node.
int slurm_tasks_on_node(const std::string& tasks_per_node, int node);

}  // namespace ddptrain
