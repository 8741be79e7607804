// Who this process is in the job, read from its launcher's environment: torchrun's contract
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), or where that is
// absent Slurm's (srun), Open MPI's (mpirun) or a PMI launcher's (MPICH's and Intel MPI's
// mpiexec): Note [Launchers' environments].
#pragma once

#include <string>
#include <vector>

namespace ddptrain {

/// Note [Launchers' environments]
/// The rank, the world size and where on its node a process runs come from one launcher's
/// variables, never a mix: the first launcher whose rank or size variable is set, in this
/// order: torchrun (and `ddptrain launch`): RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE;
/// Open MPI's mpirun: OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}; a PMI launcher
/// (MPICH's and Intel MPI's mpiexec): PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS
/// (Hydra's); Slurm's srun: SLURM_PROCID, SLURM_STEP_NUM_TASKS (else SLURM_NTASKS),
/// SLURM_LOCALID, and the ranks on this node from the step's task list
/// SLURM_STEP_TASKS_PER_NODE (else SLURM_TASKS_PER_NODE; "4(x2),3") at SLURM_NODEID (not
/// SLURM_NTASKS_PER_NODE, a request that the step's layout may not follow). Slurm comes last
/// because an mpirun, mpiexec or torchrun inside an allocation inherits SLURM_* variables of
/// another step (mpirun's daemons are one srun task per node): they would give every rank
/// rank 0. srun --mpi=pmi2 sets PMI_RANK itself; there Slurm's step, when it has the same rank
/// and size, says where the rank runs. A launcher that gives no local fields means one node:
/// the local size is the world and the local rank the rank. Where the world has more than one
/// rank, MASTER_ADDR and MASTER_PORT are needed whatever the launcher (the TCPStore
/// rendezvous: a Slurm or MPI job exports them in its script). A malformed or inconsistent
/// value is a UsageError naming the variable and how to fix it.
struct EnvContract {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool use_agent_store = false;  // torchrun's agent already serves the TCPStore
  int restart_count = 0;         // TORCHELASTIC_RESTART_COUNT (this node's agent's count)
  std::string job_id;      // TORCHELASTIC_RUN_ID, torchrun's rendezvous id ("": none, or static's "none")
  std::string launch_dir;  // DDPTRAIN_LAUNCH_DIR: ddptrain launch watches for stalls there
  /// Seconds the launcher gives its workers between a stop signal and SIGKILL (0: unknown):
  /// DDPTRAIN_STOP_GRACE_S (ddptrain launch's --signal_grace_s), else torchrun's
  /// (TORCHELASTIC_MAX_RESTARTS set): PET_SHUTDOWN_TIMEOUT or TORCH_ELASTIC_SHUTDOWN_TIMEOUT where a
  /// whole positive number, else its default 30 (a --shutdown_timeout on its command line is unseen).
  int stop_grace_s = 0;
};

/// Reads and validates the environment; UsageError naming the variable when invalid.
EnvContract read_env_contract();

/// The tasks Slurm runs on node `node` by its task list's notation (counts from 1 to 2^20
/// separated by commas, "N(xM)" for M nodes of N: "4(x2),3" is 4, 4, 3). UsageError naming
/// `variable` when malformed or when the list has no such node.
int slurm_tasks_on_node(const std::string& tasks_per_node, int node,
                        const char* variable = "SLURM_STEP_TASKS_PER_NODE");

/// Every variable read_env_contract reads (for tests that set a launcher's environment).
const std::vector<const char*>& launcher_variables();

/// Whether `addr` names this machine itself (localhost, 127.x.x.x, ::1): only processes on
/// this machine reach a store or a Gloo device listening there.
bool is_loopback_address(const std::string& addr);

}  // namespace ddptrain
