// Note [Launchers' environments]: who a process is, from torchrun's, Slurm's, Open MPI's or a
// PMI launcher's variables (dist/env_contract.h), and the errors that name the variable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "dist/env_contract.h"
#include "util/error.h"

namespace ddptrain {
namespace {

// Every variable read_env_contract reads is unset for the test's life, then `set` is set; the
// process's own values come back at the end.
class LauncherEnv {
 public:
  explicit LauncherEnv(const std::map<std::string, std::string>& set) {
    for (const char* name : kRead) {
      const char* v = std::getenv(name);
      saved_[name] = v ? std::optional<std::string>(v) : std::nullopt;
      ::unsetenv(name);
    }
    for (const auto& [name, value] : set) ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~LauncherEnv() {
    for (const auto& [name, value] : saved_)
      value ? ::setenv(name.c_str(), value->c_str(), 1) : ::unsetenv(name.c_str());
  }

 private:
  static constexpr const char* kRead[] = {"RANK",
                                          "WORLD_SIZE",
                                          "LOCAL_RANK",
                                          "LOCAL_WORLD_SIZE",
                                          "MASTER_ADDR",
                                          "MASTER_PORT",
                                          "SLURM_PROCID",
                                          "SLURM_NTASKS",
                                          "SLURM_LOCALID",
                                          "SLURM_NTASKS_PER_NODE",
                                          "SLURM_TASKS_PER_NODE",
                                          "SLURM_NODEID",
                                          "OMPI_COMM_WORLD_RANK",
                                          "OMPI_COMM_WORLD_SIZE",
                                          "OMPI_COMM_WORLD_LOCAL_RANK",
                                          "OMPI_COMM_WORLD_LOCAL_SIZE",
                                          "PMI_RANK",
                                          "PMI_SIZE",
                                          "MPI_LOCALRANKID",
                                          "MPI_LOCALNRANKS",
                                          "TORCHELASTIC_USE_AGENT_STORE",
                                          "TORCHELASTIC_RESTART_COUNT",
                                          "DDPTRAIN_LAUNCH_DIR"};
  std::map<std::string, std::optional<std::string>> saved_;
};

const std::map<std::string, std::string> kRendezvous = {{"MASTER_ADDR", "10.0.0.1"},
                                                        {"MASTER_PORT", "29511"}};

std::map<std::string, std::string> with_rendezvous(std::map<std::string, std::string> vars) {
  vars.insert(kRendezvous.begin(), kRendezvous.end());
  return vars;
}

// rank, world size, local rank, local world size.
std::tuple<int, int, int, int> who(const EnvContract& e) {
  return {e.rank, e.world_size, e.local_rank, e.local_world_size};
}

TEST(LauncherEnv, NoneIsOneProcessAndTorchrunsIsReadAsGiven) {
  {
    LauncherEnv env({});
    EXPECT_EQ(who(read_env_contract()), std::make_tuple(0, 1, 0, 1));
  }
  LauncherEnv env(with_rendezvous({{"RANK", "5"},
                                   {"WORLD_SIZE", "8"},
                                   {"LOCAL_RANK", "1"},
                                   {"LOCAL_WORLD_SIZE", "4"},
                                   {"SLURM_PROCID", "0"},
                                   {"SLURM_NTASKS", "2"}}));
  const EnvContract e = read_env_contract();
  EXPECT_EQ(who(e), std::make_tuple(5, 8, 1, 4)) << "torchrun's names come before Slurm's";
  EXPECT_EQ(e.master_addr, "10.0.0.1");
  EXPECT_EQ(e.master_port, 29511);
}

TEST(LauncherEnv, SlurmsRanksPerNodeComeFromTasksPerNodeWithoutNtasksPerNode) {
  {  // srun --ntasks-per-node 4 over 2 nodes
    LauncherEnv env(with_rendezvous({{"SLURM_PROCID", "6"},
                                     {"SLURM_NTASKS", "8"},
                                     {"SLURM_LOCALID", "2"},
                                     {"SLURM_NTASKS_PER_NODE", "4"},
                                     {"SLURM_TASKS_PER_NODE", "4(x2)"},
                                     {"SLURM_NODEID", "1"}}));
    EXPECT_EQ(who(read_env_contract()), std::make_tuple(6, 8, 2, 4));
  }
  {  // srun -n 7 over 2 nodes: no SLURM_NTASKS_PER_NODE; node 1 runs 3
    LauncherEnv env(with_rendezvous({{"SLURM_PROCID", "5"},
                                     {"SLURM_NTASKS", "7"},
                                     {"SLURM_LOCALID", "1"},
                                     {"SLURM_TASKS_PER_NODE", "4,3"},
                                     {"SLURM_NODEID", "1"}}));
    EXPECT_EQ(who(read_env_contract()), std::make_tuple(5, 7, 1, 3));
  }
  EXPECT_EQ(slurm_tasks_on_node("8", 0), 8);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 2), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 3), 1);
  EXPECT_EQ(slurm_tasks_on_node("1,2(x2),5", 3), 5);
  for (const char* bad : {"", "x", "4,", "2(x", "2(x0)", "0", "2(3)", "-1"})
    EXPECT_THROW(slurm_tasks_on_node(bad, 0), UsageError) << bad;
  try {
    slurm_tasks_on_node("2(x3)", 3);
    ADD_FAILURE() << "node 3 of 3 nodes was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("SLURM_TASKS_PER_NODE='2(x3)'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("LOCAL_WORLD_SIZE"), std::string::npos) << e.what();
  }
}

TEST(LauncherEnv, OpenMpisAndPmisVariablesAreRead) {
  {
    LauncherEnv env(with_rendezvous({{"OMPI_COMM_WORLD_RANK", "3"},
                                     {"OMPI_COMM_WORLD_SIZE", "4"},
                                     {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                     {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
    EXPECT_EQ(who(read_env_contract()), std::make_tuple(3, 4, 1, 2));
  }
  {  // MPICH's Hydra
    LauncherEnv env(with_rendezvous(
        {{"PMI_RANK", "2"}, {"PMI_SIZE", "6"}, {"MPI_LOCALRANKID", "2"}, {"MPI_LOCALNRANKS", "3"}}));
    EXPECT_EQ(who(read_env_contract()), std::make_tuple(2, 6, 2, 3));
  }
  // A PMI launcher that says nothing of nodes: one node, the local rank is the rank.
  LauncherEnv env(with_rendezvous({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}));
  EXPECT_EQ(who(read_env_contract()), std::make_tuple(1, 2, 1, 2));
}

TEST(LauncherEnv, WhatCannotBeAJobIsNamed) {
  const auto message = [](const std::map<std::string, std::string>& vars) -> std::string {
    LauncherEnv env(vars);
    try {
      read_env_contract();
    } catch (const UsageError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  EXPECT_NE(message({{"RANK", "0"}}).find("RANK and WORLD_SIZE must be set together"), std::string::npos);
  EXPECT_NE(
      message(with_rendezvous({{"RANK", "2"}, {"WORLD_SIZE", "2"}})).find("RANK=2 must be < WORLD_SIZE=2"),
      std::string::npos);
  EXPECT_NE(message({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}}).find("MASTER_ADDR is not set"),
            std::string::npos);
  EXPECT_NE(message(with_rendezvous(
                        {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}))
                .find("LOCAL_RANK=2 must be < LOCAL_WORLD_SIZE=2"),
            std::string::npos);
  EXPECT_NE(message(with_rendezvous(
                        {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_TASKS_PER_NODE", "two"}}))
                .find("SLURM_TASKS_PER_NODE='two'"),
            std::string::npos);
  EXPECT_NE(message({{"WORLD_SIZE", "abc"}, {"RANK", "0"}}).find("WORLD_SIZE"), std::string::npos);
}

}  // namespace
}  // namespace ddptrain
