// Note [Launchers' environments]: who a process is, from one launcher's variables (torchrun's,
// Open MPI's, a PMI launcher's or Slurm's; dist/env_contract.h), and the errors that name them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "dist/env_contract.h"
#include "util/error.h"
#include "util/error_file.h"

namespace ddptrain {
namespace {

// Every variable read_env_contract reads is unset for the guard's life, then `set` is set;
// the process's own values come back at the end.
class LauncherEnv {
 public:
  explicit LauncherEnv(const std::map<std::string, std::string>& set) {
    for (const char* name : launcher_variables()) {
      const char* v = std::getenv(name);
      saved_[name] = v ? std::optional<std::string>(v) : std::nullopt;
      ::unsetenv(name);
    }
    for (const auto& [name, value] : set) ::setenv(name.c_str(), value.c_str(), 1);
  }
  LauncherEnv(const LauncherEnv&) = delete;
  LauncherEnv& operator=(const LauncherEnv&) = delete;
  ~LauncherEnv() {
    for (const auto& [name, value] : saved_)
      value ? ::setenv(name.c_str(), value->c_str(), 1) : ::unsetenv(name.c_str());
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

std::map<std::string, std::string> with_rendezvous(std::map<std::string, std::string> vars) {
  vars.insert({{"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29511"}});
  return vars;
}

// rank, world size, local rank, local world size.
std::tuple<int, int, int, int> who(const std::map<std::string, std::string>& vars) {
  LauncherEnv env(vars);
  const EnvContract e = read_env_contract();
  return {e.rank, e.world_size, e.local_rank, e.local_world_size};
}

// read_env_contract's UsageError message, or "(accepted)".
std::string refusal(const std::map<std::string, std::string>& vars) {
  LauncherEnv env(vars);
  try {
    read_env_contract();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(LauncherEnv, NoneIsOneProcessAndTorchrunsIsReadAsGiven) {
  EXPECT_EQ(who({}), std::make_tuple(0, 1, 0, 1));
  // torchrun inside a Slurm step: torchrun's own variables, none of Slurm's.
  EXPECT_EQ(who(with_rendezvous({{"RANK", "5"},
                                 {"WORLD_SIZE", "8"},
                                 {"LOCAL_RANK", "1"},
                                 {"LOCAL_WORLD_SIZE", "4"},
                                 {"SLURM_PROCID", "0"},
                                 {"SLURM_NTASKS", "2"},
                                 {"SLURM_LOCALID", "0"}})),
            std::make_tuple(5, 8, 1, 4));
  // RANK and WORLD_SIZE by hand: one node (not a Slurm step's local fields).
  EXPECT_EQ(who(with_rendezvous({{"RANK", "3"},
                                 {"WORLD_SIZE", "4"},
                                 {"SLURM_LOCALID", "0"},
                                 {"SLURM_STEP_TASKS_PER_NODE", "1(x4)"},
                                 {"SLURM_NODEID", "3"}})),
            std::make_tuple(3, 4, 3, 4));
  LauncherEnv env(with_rendezvous({{"RANK", "1"}, {"WORLD_SIZE", "2"}}));
  const EnvContract e = read_env_contract();
  EXPECT_EQ(e.master_addr, "10.0.0.1");
  EXPECT_EQ(e.master_port, 29511);
}

// How long a stop may take to save before the launcher's SIGKILL: ddptrain launch's
// --signal_grace_s, torchrun's shutdown timeout (30 s unless TORCH_ELASTIC_SHUTDOWN_TIMEOUT), else
// unknown.
TEST(LauncherEnv, TheLaunchersStopGraceIsKnownWhereItSaysIt) {
  const auto grace = [](std::map<std::string, std::string> vars) {
    vars.insert({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
    LauncherEnv env(vars);
    return read_env_contract().stop_grace_s;
  };
  EXPECT_EQ(grace({}), 0);
  EXPECT_EQ(grace({{"TORCHELASTIC_MAX_RESTARTS", "3"}}), 30);
  EXPECT_EQ(grace({{"TORCHELASTIC_MAX_RESTARTS", "3"}, {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "120"}}), 120);
  EXPECT_EQ(grace({{"TORCHELASTIC_MAX_RESTARTS", "3"},
                   {"PET_SHUTDOWN_TIMEOUT", "90"},
                   {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "120"}}),
            90);
  // torchrun's variables are read leniently: a value only a warning uses never stops a start.
  for (const char* odd : {"30.5", "-1", "soon", "30 "})
    EXPECT_EQ(grace({{"TORCHELASTIC_MAX_RESTARTS", "3"}, {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", odd}}), 30)
        << odd;
  EXPECT_EQ(grace({{"TORCHELASTIC_MAX_RESTARTS", "0"}, {"DDPTRAIN_STOP_GRACE_S", "60"}}), 60);
  EXPECT_NE(refusal({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"DDPTRAIN_STOP_GRACE_S", "soon"}}), "(accepted)");
}

TEST(LauncherEnv, SlurmsRanksPerNodeComeFromTheStepsTaskList) {
  // srun -n 7 over 2 nodes: node 1 runs 3, whatever --ntasks-per-node the allocation asked.
  EXPECT_EQ(who(with_rendezvous({{"SLURM_PROCID", "5"},
                                 {"SLURM_STEP_NUM_TASKS", "7"},
                                 {"SLURM_NTASKS", "8"},
                                 {"SLURM_LOCALID", "1"},
                                 {"SLURM_STEP_TASKS_PER_NODE", "4,3"},
                                 {"SLURM_TASKS_PER_NODE", "4(x2)"},
                                 {"SLURM_NODEID", "1"}})),
            std::make_tuple(5, 7, 1, 3));
  // Without the step's variables, the job's.
  EXPECT_EQ(who(with_rendezvous({{"SLURM_PROCID", "6"},
                                 {"SLURM_NTASKS", "8"},
                                 {"SLURM_LOCALID", "2"},
                                 {"SLURM_TASKS_PER_NODE", "4(x2)"},
                                 {"SLURM_NODEID", "1"}})),
            std::make_tuple(6, 8, 2, 4));
  // One node needs no SLURM_NODEID; several do.
  EXPECT_EQ(who(with_rendezvous({{"SLURM_PROCID", "1"},
                                 {"SLURM_NTASKS", "2"},
                                 {"SLURM_LOCALID", "1"},
                                 {"SLURM_TASKS_PER_NODE", "2"}})),
            std::make_tuple(1, 2, 1, 2));
  EXPECT_NE(refusal(with_rendezvous({{"SLURM_PROCID", "1"},
                                     {"SLURM_NTASKS", "4"},
                                     {"SLURM_LOCALID", "1"},
                                     {"SLURM_TASKS_PER_NODE", "2(x2)"}}))
                .find("SLURM_NODEID is not set"),
            std::string::npos);

  EXPECT_EQ(slurm_tasks_on_node("8", 0), 8);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 2), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 3), 1);
  EXPECT_EQ(slurm_tasks_on_node("1,2(x2),5", 3), 5);
  for (const char* bad : {"", "x", "4,", ",4", "4,,3", "2(x", "2(x)", "2(x0)", "0", "2(3)", "-1", "+2", " 4",
                          "4294967297", "2(x4294967297)"})
    EXPECT_THROW(slurm_tasks_on_node(bad, 0), UsageError) << "'" << bad << "'";
  EXPECT_THROW(slurm_tasks_on_node("4", -1), UsageError);
  try {
    slurm_tasks_on_node("2(x3)", 3, "SLURM_TASKS_PER_NODE");
    ADD_FAILURE() << "node 3 of 3 nodes was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("SLURM_TASKS_PER_NODE='2(x3)' lists 3 node(s)"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("LOCAL_WORLD_SIZE"), std::string::npos) << e.what();
  }
}

TEST(LauncherEnv, MpiLaunchersInsideASlurmJobAreReadNotSlurmsStep) {
  // mpirun inside an allocation: its ranks inherit a daemon step's SLURM_* (one task per node).
  const std::map<std::string, std::string> daemon_step = {{"SLURM_PROCID", "0"},
                                                          {"SLURM_NTASKS", "2"},
                                                          {"SLURM_LOCALID", "0"},
                                                          {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
                                                          {"SLURM_NODEID", "1"}};
  auto open_mpi = with_rendezvous(daemon_step);
  open_mpi.insert({{"OMPI_COMM_WORLD_RANK", "3"},
                   {"OMPI_COMM_WORLD_SIZE", "4"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_EQ(who(open_mpi), std::make_tuple(3, 4, 1, 2));
  auto hydra = with_rendezvous(daemon_step);  // MPICH's mpiexec
  hydra.insert({{"PMI_RANK", "2"}, {"PMI_SIZE", "6"}, {"MPI_LOCALRANKID", "2"}, {"MPI_LOCALNRANKS", "3"}});
  EXPECT_EQ(who(hydra), std::make_tuple(2, 6, 2, 3));
  // srun --mpi=pmi2: Slurm sets PMI_RANK, and its step (the same rank and size) says the node.
  EXPECT_EQ(who(with_rendezvous({{"PMI_RANK", "5"},
                                 {"PMI_SIZE", "8"},
                                 {"SLURM_PROCID", "5"},
                                 {"SLURM_STEP_NUM_TASKS", "8"},
                                 {"SLURM_LOCALID", "1"},
                                 {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"},
                                 {"SLURM_NODEID", "1"}})),
            std::make_tuple(5, 8, 1, 4));
  // A PMI launcher that says nothing of nodes, inside another step: one node.
  auto bare = with_rendezvous(daemon_step);
  bare.insert({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}});
  EXPECT_EQ(who(bare), std::make_tuple(1, 2, 1, 2));
}

TEST(LauncherEnv, WhatCannotBeAJobIsNamed) {
  EXPECT_NE(refusal({{"RANK", "0"}}).find("RANK and WORLD_SIZE must be set together (found RANK only)"),
            std::string::npos);
  EXPECT_NE(refusal({{"OMPI_COMM_WORLD_SIZE", "2"}})
                .find("OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE must be set together (found "
                      "OMPI_COMM_WORLD_SIZE only)"),
            std::string::npos);
  EXPECT_NE(
      refusal(with_rendezvous({{"RANK", "2"}, {"WORLD_SIZE", "2"}})).find("RANK=2 must be < WORLD_SIZE=2"),
      std::string::npos);
  EXPECT_NE(refusal({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}}).find("MASTER_ADDR is not set"),
            std::string::npos);
  EXPECT_NE(refusal(with_rendezvous(
                        {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}))
                .find("LOCAL_RANK=2 must be < LOCAL_WORLD_SIZE=2"),
            std::string::npos);
  EXPECT_NE(refusal(with_rendezvous({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "4"}}))
                .find("LOCAL_WORLD_SIZE=4 must be <= WORLD_SIZE=2"),
            std::string::npos);
  EXPECT_NE(refusal(with_rendezvous({{"SLURM_PROCID", "1"},
                                     {"SLURM_NTASKS", "2"},
                                     {"SLURM_NODEID", "0"},
                                     {"SLURM_STEP_TASKS_PER_NODE", "two"}}))
                .find("SLURM_STEP_TASKS_PER_NODE='two'"),
            std::string::npos);
  EXPECT_NE(refusal({{"WORLD_SIZE", "abc"}, {"RANK", "0"}}).find("WORLD_SIZE"), std::string::npos);
}

// The error file of torchrun's contract (util/error_file.h) is whole JSON or the earlier one:
// torchrun's agent raises on one that is not, which ends the job with no restart. A write that
// cannot finish (here its temporary name is taken by a folder) leaves the earlier file as it
// was; before, the file was truncated, then written.
TEST(TorchrunErrorFile, IsWrittenWholeOrNotAtAll) {
  namespace fs = std::filesystem;
  const std::string dir = fs::temp_directory_path() / ("ddptrain_error_file_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = dir + "/error.json";
  const auto message_in = [&] { return nlohmann::json::parse(std::ifstream(path))["message"]; };
  ::setenv("TORCHELASTIC_ERROR_FILE", path.c_str(), 1);
  write_error_file("first", {{"secondary", "false"}});
  EXPECT_EQ(message_in()["message"], "first");
  EXPECT_EQ(message_in()["extraInfo"]["secondary"], "false");
  EXPECT_GT(std::stoll(message_in()["extraInfo"]["timestamp"].get<std::string>()), 0);
  const std::string taken = path + ".tmp." + std::to_string(::getpid());
  fs::create_directories(taken + "/in_the_way");
  write_error_file("second", {});
  EXPECT_EQ(message_in()["message"], "first") << "a write that could not finish replaced the file";
  fs::remove_all(taken);
  write_error_file("third", {});
  EXPECT_EQ(message_in()["message"], "third");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1)
      << "a temporary file was left";
  ::unsetenv("TORCHELASTIC_ERROR_FILE");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ddptrain
