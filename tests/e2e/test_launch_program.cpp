// `ddptrain launch [launch flags] PROGRAM [ARGS...]` (#13 item 5): any program runs under the
// torchrun environment contract, as torchrun --no-python runs it.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

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
      "echo \"torchrun's $ROLE_RANK $ROLE_NAME $ROLE_WORLD_SIZE $GROUP_WORLD_SIZE $TORCHELASTIC_RUN_ID "
      "$TORCHELASTIC_MAX_RESTARTS $TORCHELASTIC_USE_AGENT_STORE launch_dir=$DDPTRAIN_LAUNCH_DIR\"; "
      "echo \"threads $OMP_NUM_THREADS\"; "
      "if [ \"$RANK\" = 0 ]; then touch " +
      marker +
      "; fi; "
      "if [ \"$RANK\" = 1 ]; then for i in $(seq 600); do [ -e " +
      marker + " ] && break; sleep 0.05; done; exit 3; fi";
  // The launcher's own environment as an outer torchrun's (or a stale shell's) would leave it:
  // its workers get the launcher's values (rank 0 serves the store; no stall folder).
  ProcResult r = run({binary(), "launch", "--nproc_per_node", "2", "--master_port", std::to_string(port),
                      "sh", "-c", script, "sh", "--help"},
                     {{"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"DDPTRAIN_LAUNCH_DIR", "/tmp/stale"}}, 60);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  for (int rank : {0, 1}) {
    const std::string line = "[" + std::to_string(rank) + "] contract " + std::to_string(rank) + " " +
                             std::to_string(rank) + " 2 2 127.0.0.1 " + std::to_string(port) + " --help";
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
    const std::string torchruns = "[" + std::to_string(rank) + "] torchrun's " + std::to_string(rank) +
                                  " default 2 1 none 0 False launch_dir=";
    EXPECT_NE(r.output.find(torchruns + "\n"), std::string::npos) << torchruns << "\n" << r.output;
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
  // Restarts of a multi-node job are torchrun's: each node's launcher would restart alone.
  ProcResult nodes =
      run({binary(), "launch", "--nnodes", "2", "--node_rank", "0", "--max_restarts", "1", "true"}, {}, 60);
  EXPECT_EQ(nodes.exit_code, 2) << nodes.output;
  EXPECT_NE(nodes.output.find("--max_restarts=1 with --nnodes=2"), std::string::npos) << nodes.output;
  // --stall_s where no worker keeps a flight recorder to watch: exit 2 (it watched nothing).
  for (const std::vector<std::string>& worker : std::vector<std::vector<std::string>>{
           {"train", "--flight_recorder", "0", "--checkpoint_dir", "/tmp/x"},
           {"train", "--checkpoint_dir", ""},
           {"eval", "--checkpoint", "/tmp/x"}}) {
    std::vector<std::string> cmd = {binary(), "launch", "--nproc_per_node", "2", "--stall_s", "2"};
    cmd.insert(cmd.end(), worker.begin(), worker.end());
    ProcResult stall = run(cmd, {}, 60);
    EXPECT_EQ(stall.exit_code, 2) << worker[1] << ": " << stall.output;
    EXPECT_NE(
        stall.output.find(worker[0] == "eval" ? "eval keeps none" : "watches the workers' flight recorders"),
        std::string::npos)
        << stall.output;
  }
  // A worker's flag before the command: where it goes (it said only "unknown option").
  ProcResult early = run({binary(), "launch", "--nproc_per_node", "2", "--epochs", "1", "train"}, {}, 60);
  EXPECT_EQ(early.exit_code, 2) << early.output;
  EXPECT_NE(early.output.find("launch's flags come before the worker command"), std::string::npos)
      << early.output;
}

namespace {

// `ddptrain launch` of 2 ranks running the shell script `script` ($RANK is each rank's).
std::vector<std::string> launch_sh(const std::string& script, const std::vector<std::string>& flags = {}) {
  std::vector<std::string> cmd{binary(), "launch",        "--nproc_per_node",
                               "2",      "--master_port", std::to_string(free_port())};
  cmd.insert(cmd.end(), flags.begin(), flags.end());
  cmd.insert(cmd.end(), {"sh", "-c", script});
  return cmd;
}

// A script's start: rank 1 waits (at most 30 s) until `marker` exists, then fails with exit 3.
std::string rank1_fails_after(const std::string& marker) {
  return "if [ \"$RANK\" = 1 ]; then for i in $(seq 600); do [ -e " + marker +
         " ] && break; sleep 0.05; done; exit 3; fi; ";
}

std::string quoted(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    std::string q = "'";
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += q + "' ";
  }
  return out;
}

}  // namespace

// `ddptrain launch ... | head -n 1`: once head has ended, the launcher's writes fail. It drops
// the lines and goes on; before, SIGPIPE ended it, and with it (PR_SET_PDEATHSIG) every worker,
// as after `| tee log` and a Ctrl-C, in the middle of the save on that signal.
TEST(LaunchProgram, AClosedOutputEndsNeitherTheLauncherNorItsWorkers) {
  const std::string dir = fresh_dir("launch_closed_output");
  const std::string script =
      "for i in $(seq 100); do echo line $i; done; sleep 1; "
      "for i in $(seq 100); do echo more $i; done; touch " +
      dir + "/done_$RANK";
  ProcResult r =
      run({"bash", "-c",
           quoted(launch_sh(script)) + "| head -n 1; echo ${PIPESTATUS[0]} > " + dir + "/launcher_exit_code"},
          {}, 60);
  EXPECT_EQ(read_text(dir + "/launcher_exit_code"), "0\n") << r.output;
  for (int rank : {0, 1})
    EXPECT_TRUE(std::filesystem::exists(dir + "/done_" + std::to_string(rank)))
        << "rank " << rank << " ended early";
}

// Note [The launcher's output never holds the launcher]: its stdout is a pipe that nobody reads
// (`| sleep 60`: full at 64 KiB), rank 0 writes 1 MiB of lines and sleeps, rank 1 fails after
// a second. The launcher stops rank 0 and exits with rank 1's code within a few seconds. Before,
// its one thread blocked writing rank 0's lines: rank 1's failure went unseen and nothing ended.
TEST(LaunchProgram, AReaderThatStopsReadingHoldsNeitherTheTeardownNorTheExit) {
  const std::string dir = fresh_dir("launch_blocked_output");
  const std::string script =
      "if [ \"$RANK\" = 0 ]; then yes 0123456789012345678901234567890123456789 | head -c 1048576; "
      "exec sleep 300; fi; sleep 1; exit 3";
  const std::string timed = "start=$(date +%s%N); " + quoted(launch_sh(script)) +
                            "; echo $? $(( ($(date +%s%N) - " + "start) / 1000000 )) > " + dir +
                            "/code.tmp; mv " + dir + "/code.tmp " + dir + "/code";
  const pid_t shell = spawn({"/bin/bash", "-c", "(" + timed + ") | sleep 60"}, dir + "/launch.log");
  for (int i = 0; i < 600 && !std::filesystem::exists(dir + "/code"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ::kill(-shell, SIGKILL);  // the pipeline's reader, and whatever is left
  wait_for(shell, 10);
  ASSERT_TRUE(std::filesystem::exists(dir + "/code"))
      << "no exit in 30 s: " << read_text(dir + "/launch.log");
  std::istringstream code(read_text(dir + "/code"));
  int exit_code = -1, ms = -1;
  code >> exit_code >> ms;
  EXPECT_EQ(exit_code, 3) << read_text(dir + "/launch.log");
  EXPECT_LT(ms, 20000) << read_text(dir + "/launch.log");
}

// A forwarded SIGTERM stops the workers; one that then fails (exit 7: its save on the signal
// failed) is a failure, and the launcher's exit code is its; the other's 128+15 is the stop it
// was asked for. Before, any end after a forwarded signal was a clean stop (exit 143), and a
// requeue resumed an older checkpoint without a word.
TEST(LaunchProgram, AFailureWhileStoppingOnASignalIsTheExitCode) {
  const std::string dir = fresh_dir("launch_fail_on_signal");
  const std::string script = "trap 'if [ \"$RANK\" = 1 ]; then exit 7; else exit 143; fi' TERM; touch " +
                             dir + "/ready_$RANK; while :; do sleep 0.05; done";
  const pid_t launcher = spawn(launch_sh(script), dir + "/launch.log");
  for (int i = 0;
       i < 400 && !(std::filesystem::exists(dir + "/ready_0") && std::filesystem::exists(dir + "/ready_1"));
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ::kill(launcher, SIGTERM);
  const int code = wait_for(launcher, 30);
  if (code == -1) ::kill(launcher, SIGKILL);
  EXPECT_EQ(code, 7) << read_text(dir + "/launch.log");
  // A worker that outlasts the forwarded signal's grace (its save hung) is killed, and that is a
  // failure too (exit 128+9; it was the clean stop's 143).
  const std::string hangs = "trap 'if [ \"$RANK\" = 0 ]; then exit 143; fi' TERM; touch " + dir +
                            "/hang_ready_$RANK; while :; do sleep 0.05; done";
  const pid_t second = spawn(launch_sh(hangs, {"--signal_grace_s", "1"}), dir + "/launch2.log");
  for (int i = 0; i < 400 && !(std::filesystem::exists(dir + "/hang_ready_0") &&
                               std::filesystem::exists(dir + "/hang_ready_1"));
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ::kill(second, SIGTERM);
  const int killed = wait_for(second, 30);
  if (killed == -1) ::kill(second, SIGKILL);
  EXPECT_EQ(killed, 128 + SIGKILL) << read_text(dir + "/launch2.log");
}

// SIGCHLD ignored by whatever started the launcher (an ignored signal stays ignored across
// exec): the kernel reaped the workers itself, waitpid never saw one end, and the launcher
// waited for ever. It takes SIGCHLD's default back, and rank 1's exit 3 ends the job.
TEST(LaunchProgram, AnIgnoredSigchldIsNotInherited) {
  std::vector<std::string> cmd{"python3", "-c",
                               "import os, signal, sys; signal.signal(signal.SIGCHLD, signal.SIG_IGN); "
                               "os.execvp(sys.argv[1], sys.argv[1:])"};
  const std::vector<std::string> launch = launch_sh("[ \"$RANK\" = 1 ] && exit 3; exit 0");
  cmd.insert(cmd.end(), launch.begin(), launch.end());
  const ProcResult r = run(cmd, {}, 60);
  EXPECT_EQ(r.exit_code, 3) << r.output;
}

// Each worker leads a process group of its own, which the launcher signals whole (as torchrun's
// start_new_session and killpg): a worker that is a script stops with the program it runs,
// here a sleep in the background. Before, only the script was signalled, and its program ran
// on, orphaned (with its GPU memory and, on rank 0, the port a restart needs).
TEST(LaunchProgram, AScriptsOwnProgramStopsWithIt) {
  const std::string dir = fresh_dir("launch_group");
  const std::string script = "sleep 300 & echo $! > " + dir + "/child_$RANK.tmp; mv " + dir +
                             "/child_$RANK.tmp " + dir + "/child_$RANK; wait";
  const pid_t launcher = spawn(launch_sh(script), dir + "/launch.log");
  for (int i = 0;
       i < 400 && !(std::filesystem::exists(dir + "/child_0") && std::filesystem::exists(dir + "/child_1"));
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::vector<pid_t> children;
  for (const char* rank : {"0", "1"})
    if (std::filesystem::exists(dir + "/child_" + rank))
      children.push_back(std::stoi(read_text(dir + "/child_" + rank)));
  EXPECT_EQ(children.size(), 2u) << read_text(dir + "/launch.log");
  ::kill(launcher, SIGTERM);
  const int code = wait_for(launcher, 30);
  if (code == -1) ::kill(launcher, SIGKILL);
  EXPECT_EQ(code, 128 + SIGTERM) << read_text(dir + "/launch.log");
  for (const pid_t child : children) {
    for (int i = 0; i < 100 && alive(child); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(alive(child)) << "the script's program " << child << " was left running";
    if (alive(child)) ::kill(child, SIGKILL);
  }
}

// After a worker's failure, the group of a script that SIGTERM ended is killed too: its program,
// deaf to SIGTERM here (a trainer stuck in a collective), is gone when the launcher exits or
// restarts. Before, the launcher signalled only groups whose worker it had not reaped: the
// program ran on, orphaned, holding the port, the GPU and the checkpoint folder's lock.
TEST(LaunchProgram, AFailuresTeardownEndsAReapedScriptsProgram) {
  const std::string dir = fresh_dir("launch_orphan");
  const std::string script = rank1_fails_after(dir + "/child") +
                             "(trap '' TERM; exec sleep 300) & echo $! > " + dir + "/child.tmp; mv " + dir +
                             "/child.tmp " + dir + "/child; wait";
  ProcResult r = run(launch_sh(script, {"--kill_grace_s", "1"}), {}, 60);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  ASSERT_TRUE(std::filesystem::exists(dir + "/child")) << r.output;
  const pid_t child = std::stoi(read_text(dir + "/child"));
  EXPECT_FALSE(alive(child)) << "rank 0's program " << child << " outlived the launcher: " << r.output;
  if (alive(child)) ::kill(child, SIGKILL);
}

// A Ctrl-C while a failure's teardown waits for a hung worker (deaf to SIGTERM and SIGINT): the
// launcher sends SIGKILL at once and does not restart (--max_restarts 2), exit the failure's code.
// Before, the signal was forwarded as a stop: the hung worker got the 60 s --signal_grace_s.
TEST(LaunchProgram, ASignalDuringAFailuresTeardownEndsItWithoutARestart) {
  const std::string dir = fresh_dir("launch_teardown_signal");
  const std::string script = rank1_fails_after(dir + "/held") + "trap '' TERM INT; touch " + dir +
                             "/held; while true; do sleep 0.1; done";
  std::vector<std::string> cmd = launch_sh(script, {"--max_restarts", "2", "--kill_grace_s", "30"});
  const pid_t launcher = spawn(cmd, dir + "/launch.log");
  const auto log = [&] { return read_text(dir + "/launch.log"); };
  for (int i = 0; i < 600 && log().find("stopping the other workers") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_NE(log().find("stopping the other workers"), std::string::npos) << log();
  const auto start = std::chrono::steady_clock::now();
  ::kill(launcher, SIGINT);
  const int code = wait_for(launcher, 20);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (code == -1) ::kill(-launcher, SIGKILL);
  EXPECT_EQ(code, 3) << log();
  EXPECT_LT(s, 15.0) << log();
  EXPECT_NE(log().find("not restarting: got Interrupt"), std::string::npos) << log();
  EXPECT_EQ(log().find("restarting the workers"), std::string::npos) << log();
}

// Note [Stall seen by the launcher]: a wait is timed by the launcher's clock from when it saw
// it, and an exited worker's last progress is not watched. (a) Rank 1 leaves a progress file
// with a wait of long ago and exits; rank 0 works on for 8 s (--stall_s 1). (b) Rank 0 shows a
// wait whose `since` is long past (a wall clock stepped forward) for 1 s, then none, and works
// on (--stall_s 3). Neither is a stall: both exit 0. Before, each stopped the job as stalled
// (exit 1, once the verdict's 5 s wait for flight records had passed: hence the 8 s).
// test_flight.cpp's hangs show that a real one still ends the job.
TEST(LaunchProgram, AStallIsTimedByTheLauncherAndNotWatchedAfterItsWorkerExits) {
  const std::string old_wait =
      R"({"phase":"step","step":3,"last_completed":2,"waiting":{"seq":3,"op":"all_reduce","what":"a bucket","step":3,"since":1000},"flight_dir":"/nonexistent"})";
  const std::string none =
      R"({"phase":"step","step":3,"last_completed":3,"waiting":null,"flight_dir":"/nonexistent"})";
  const std::string progress = "\"$DDPTRAIN_LAUNCH_DIR/progress_rank$RANK.json\"";
  ProcResult exited = run(
      launch_sh("if [ \"$RANK\" = 1 ]; then echo '" + old_wait + "' > " + progress + "; exit 0; fi; sleep 8",
                {"--stall_s", "1"}),
      {}, 60);
  EXPECT_EQ(exited.exit_code, 0) << exited.output;
  ProcResult stepped = run(launch_sh("if [ \"$RANK\" = 0 ]; then echo '" + old_wait + "' > " + progress +
                                         "; sleep 1; echo '" + none + "' > " + progress + "; fi; sleep 7",
                                     {"--stall_s", "3"}),
                           {}, 60);
  EXPECT_EQ(stepped.exit_code, 0) << stepped.output;
}

// The launch's folder is made under $TMPDIR, else under /tmp; the workers learn it
// (TORCHELASTIC_ERROR_FILE) and it is removed at the end. Where neither can hold it the launch
// stops with the reason (not testable here: /tmp is writable); before, it fell back to /tmp
// itself, which it removed whole at the end.
TEST(LaunchProgram, ItsFolderIsUnderTmpdirOrTmpAndRemoved) {
  const std::string dir = fresh_dir("launch_tmpdir");
  const std::string report = "echo \"$TORCHELASTIC_ERROR_FILE\" > " + dir + "/error_file_$RANK";
  ProcResult own = run(launch_sh(report), {{"TMPDIR", dir}}, 60);
  ASSERT_EQ(own.exit_code, 0) << own.output;
  const std::string in_tmpdir = read_text(dir + "/error_file_0");
  EXPECT_EQ(in_tmpdir.rfind(dir + "/ddptrain-launch-", 0), 0u) << in_tmpdir;
  EXPECT_FALSE(
      std::filesystem::exists(std::filesystem::path(in_tmpdir.substr(0, in_tmpdir.size() - 1)).parent_path()))
      << "the launch's folder was left behind";
  ProcResult missing = run(launch_sh(report), {{"TMPDIR", dir + "/missing"}}, 60);
  ASSERT_EQ(missing.exit_code, 0) << missing.output;
  EXPECT_EQ(read_text(dir + "/error_file_0").rfind("/tmp/ddptrain-launch-", 0), 0u)
      << read_text(dir + "/error_file_0");
  EXPECT_TRUE(std::filesystem::is_directory("/tmp")) << "/tmp itself was removed";
}

// Note [Agreed stop] at the launcher, with scripts for workers: rank 1 stops on a signal the
// launcher did not forward (its stop record in TORCHELASTIC_ERROR_FILE, exit 143), and rank 0
// then (a) stops too: the launcher exits 143, no restart (--max_restarts 1); (b) fails after
// (exit 3: a save that failed): the failure is the exit code and the root cause, still no
// restart: the job was asked to stop. Before (b) restarted, and the restart trained on.
TEST(LaunchProgram, AStopTheLauncherDidNotForwardIsTheJobsStopWithoutARestart) {
  for (const bool fails_after : {false, true}) {
    SCOPED_TRACE(fails_after ? "rank 0 fails after" : "rank 0 stops too");
    const std::string dir = fresh_dir(fails_after ? "launch_stop_then_failure" : "launch_stop");
    const std::string record = R"({"message":{"message":"stopped after step 7 on SIGTERM",)"
                               R"("extraInfo":{"timestamp":"1","stop_signal":"15"}}})";
    const std::string script =
        "echo $RANK >> " + dir + "/starts; if [ \"$RANK\" = 1 ]; then echo '" + record +
        "' > \"$TORCHELASTIC_ERROR_FILE\"; touch " + dir + "/stopped; exit 143; fi; " + "while [ ! -e " +
        dir + "/stopped ]; do sleep 0.05; done; sleep 0.5; " +
        (fails_after ? "echo '{\"message\":\"rank 0 save failed\"}' > "
                       "\"$TORCHELASTIC_ERROR_FILE\"; exit 3"
                     : "echo '" + record + "' > \"$TORCHELASTIC_ERROR_FILE\"; exit 143");
    ProcResult r = run(launch_sh(script, {"--max_restarts", "1"}), {}, 60);
    EXPECT_EQ(r.exit_code, fails_after ? 3 : 143) << r.output;
    EXPECT_EQ(read_text(dir + "/starts").size(), 4u)
        << "each rank started once: " << read_text(dir + "/starts") << r.output;
  }
}
