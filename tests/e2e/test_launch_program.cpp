// `ddptrain launch [launch flags] PROGRAM [ARGS...]` (#13 item 5): any program runs under the
// torchrun environment contract, as torchrun --no-python runs it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "e2e_helpers.h"
#include "proc.h"

using namespace ddptrain::e2e;

TEST(LaunchProgram, EachRankGetsTheContractAndTheFirstFailureIsTheExitCode) {
  const int port = free_port();
  // Rank 1 fails only once rank 0 has printed: the launcher stops the other workers at the
  // first failure, and a rank 0 not yet started on a loaded machine would print nothing.
  const std::string marker = fresh_dir("launch_program") + "/rank0_printed";
  const std::string script =
      "echo \"contract $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $1\"; "
      "echo \"threads $OMP_NUM_THREADS\"; "
      "if [ \"$RANK\" = 0 ]; then touch " +
      marker +
      "; fi; "
      "if [ \"$RANK\" = 1 ]; then for i in $(seq 600); do [ -e " +
      marker + " ] && break; sleep 0.05; done; exit 3; fi";
  ProcResult r = run({binary(), "launch", "--nproc_per_node", "2", "--master_port", std::to_string(port),
                      "sh", "-c", script, "sh", "--help"},
                     {}, 60);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  for (int rank : {0, 1}) {
    const std::string line = "[" + std::to_string(rank) + "] contract " + std::to_string(rank) + " " +
                             std::to_string(rank) + " 2 2 127.0.0.1 " + std::to_string(port) + " --help";
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  }
  EXPECT_NE(r.output.find("FAILED: rank 1"), std::string::npos) << r.output;
  // A program of the user's gets the cores shared among its workers (LibTorch would start a
  // thread per core in each), as torchrun sets OMP_NUM_THREADS.
  const char* own = std::getenv("OMP_NUM_THREADS");  // the user's choice stands
  const std::string threads =
      own ? own : std::to_string(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 2));
  EXPECT_NE(r.output.find("[0] threads " + threads), std::string::npos) << r.output;
  ProcResult ok =
      run({binary(), "launch", "--nproc_per_node", "2", "--master_port", std::to_string(free_port()), "true"},
          {}, 60);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  ProcResult missing = run({binary(), "launch", "--nproc_per_node", "2", "no-such-program-xyz"}, {}, 60);
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("'no-such-program-xyz' is neither a ddptrain command"), std::string::npos)
      << missing.output;
}
