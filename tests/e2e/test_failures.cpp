// Failure tests: real processes killed, hung, raising or fed damaged checkpoints; every one
// must end the job in time, name the cause and lose nothing.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "../common/free_port.h"
#include "e2e_helpers.h"
#include "proc.h"

using namespace ddptrain::e2e;
namespace fs = std::filesystem;

TEST(E2E, KilledMidEpochThenResumedAutoEqualsUninterrupted) {
  // 512 samples, world 2, batch 16: 16 steps per epoch; checkpoints every 5 steps.
  const int port = free_port();
  std::vector<std::string> extra = {"--dataset_size",     "512", "--save_every_steps", "5",
                                    "--keep_checkpoints", "2"};
  std::string a = fresh_dir("midepoch_a"), b = fresh_dir("midepoch_b");
  const std::string trace_a = fresh_dir("midepoch_trace_a"), trace_r = fresh_dir("midepoch_trace_r");
  auto traced = [](std::vector<std::string> args, const std::string& dir) {
    args.insert(args.end(), {"--trace_samples_dir", dir});
    return args;
  };
  ProcResult full = run(launch(2, port, traced(tiny_train(a, extra), trace_a)), {}, 300);
  ASSERT_EQ(full.exit_code, 0) << full.output;

  // Rank 1 SIGKILLs itself after step 12 (mid-epoch 1 of 2); the last checkpoint is step 10.
  ProcResult killed = run(launch(2, port, tiny_train(b, extra)), fault_at_step("KILL", 12, 1), 300);
  EXPECT_NE(killed.exit_code, 0) << killed.output;
  EXPECT_NE(killed.output.find("FAILED: rank 1 (pid"), std::string::npos) << killed.output;
  EXPECT_NE(killed.output.find("killed by signal 9"), std::string::npos) << killed.output;
  auto args = traced(tiny_train(b, extra), trace_r);
  args.insert(args.end(), {"--resume_from", "auto"});
  ProcResult resumed = run(launch(2, port, args), {}, 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  // The samples seen after the resume, micro-batch by micro-batch on every rank, are the
  // uninterrupted run's from step 10 on.
  for (int r = 0; r < 2; ++r) {
    auto lines = [](const std::string& text) {
      std::vector<std::string> v;
      std::istringstream in(text);
      for (std::string l; std::getline(in, l);)
        if (l.rfind("# run", 0) != 0) v.push_back(l);  // the micro-batches only
      return v;
    };
    const auto all = lines(read_text(trace_a + "/rank" + std::to_string(r) + ".txt"));
    const auto after = lines(read_text(trace_r + "/rank" + std::to_string(r) + ".txt"));
    ASSERT_EQ(all.size(), 32u);  // 2 epochs x 16 micro-batches
    ASSERT_EQ(after.size(), 32u - 10u) << "rank " << r;
    EXPECT_EQ(after.front().rfind("epoch 1 micro 10:", 0), 0u) << after.front();
    EXPECT_TRUE(std::equal(after.begin(), after.end(), all.begin() + 10))
        << "rank " << r << " saw other samples";
  }
  EXPECT_FALSE(lines_with(resumed.output, "resuming from " + b + "/step_00000010").empty()) << resumed.output;
  EXPECT_FALSE(lines_with(resumed.output, "continuing at epoch 1 micro-batch 10").empty()) << resumed.output;
  EXPECT_EQ(fingerprints(full.output).at(0), fingerprints(resumed.output).at(0))
      << "a run resumed mid-epoch differs from the uninterrupted one";
  EXPECT_EQ(fingerprints(resumed.output).at(0), fingerprints(resumed.output).at(1));
  // Optimizer state (momentum buffers) too, and the saved model byte for byte.
  auto opt_fp = [](const std::string& out) {
    auto l = lines_with(out, "optimizer state fingerprint: ");
    return l.empty() ? std::string("none") : l.front().substr(l.front().rfind(' ') + 1);
  };
  EXPECT_EQ(opt_fp(full.output), opt_fp(resumed.output));
  EXPECT_NE(opt_fp(full.output), "none") << full.output;
  const std::string model_a = read_text(a + "/epoch_0002/model.pt");
  EXPECT_FALSE(model_a.empty());
  EXPECT_TRUE(model_a == read_text(b + "/epoch_0002/model.pt")) << "model.pt differs after the resume";
  // Retention: only the 2 newest complete checkpoints remain.
  int complete = 0;
  for (const auto& e : fs::directory_iterator(b)) complete += fs::exists(e.path() / "manifest.json") ? 1 : 0;
  EXPECT_EQ(complete, 2);

  // The same failure under `launch --max_restarts 1`: the launcher restarts the group, which
  // resumes by itself, and the run ends equal to the uninterrupted one.
  std::string c = fresh_dir("midepoch_c");
  ProcResult restarted =
      run(launch_restarting(2, port, 1, tiny_train(c, extra)), fault_at_step("KILL", 12, 1), 300);
  ASSERT_EQ(restarted.exit_code, 0) << restarted.output;
  EXPECT_NE(restarted.output.find("restarting the workers (restart 1 of 1) after rank 1"), std::string::npos)
      << restarted.output;
  EXPECT_FALSE(lines_with(restarted.output, "resumed from " + c + "/step_00000010").empty())
      << restarted.output;
  EXPECT_EQ(fingerprints(full.output).at(0), fingerprints(restarted.output).at(0));
}

// A group that resumed from a checkpoint elsewhere and failed before it saved one of its own is
// restarted from that checkpoint (--resume_fallback, which the launcher adds), not from
// scratch: it ends as the same resume uninterrupted.
TEST(E2E, ARestartBeforeTheFirstSaveResumesTheCheckpointTheFirstAttemptResumed) {
  const int port = free_port();
  const std::string a = fresh_dir("fallback_a");
  ASSERT_EQ(run(launch(2, port, tiny_train(a, {"--epochs", "1"})), {}, 300).exit_code, 0);
  const std::vector<std::string> resume = {"--resume_from", a + "/epoch_0001"};  // step 8 of 16
  ProcResult whole = run(launch(2, port, tiny_train(fresh_dir("fallback_whole"), resume)), {}, 300);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  ProcResult restarted = run(launch_restarting(2, port, 1, tiny_train(fresh_dir("fallback_c"), resume)),
                             fault_at_step("KILL", 10, 1), 300);
  ASSERT_EQ(restarted.exit_code, 0) << restarted.output;
  EXPECT_FALSE(lines_with(restarted.output, "; resuming from " + a + "/epoch_0001 (resume_fallback)").empty())
      << restarted.output;
  EXPECT_EQ(fingerprints(whole.output).at(0), fingerprints(restarted.output).at(0));
  // A group that saves nothing (--checkpoint_dir ''): a restart starts it again from scratch
  // (it was refused: the launcher's --resume_from auto needs a folder).
  ProcResult again =
      run(launch_restarting(2, port, 1, tiny_train("", {"--epochs", "1"})), fault_at_step("KILL", 3, 1), 300);
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("restarting the workers (restart 1 of 1)"), std::string::npos) << again.output;
}

// A group that resumed a checkpoint of its own folder, which rotation deleted once later ones
// were saved (--keep_checkpoints), and then failed: the restart resumes this run's newest (it
// stopped with exit 2: the launcher's --resume_fallback named a folder no longer there).
TEST(E2E, ARestartAfterRotationDeletedTheResumedCheckpointResumesTheNewest) {
  const int port = free_port();
  const std::string c = fresh_dir("rotated_c"), w = fresh_dir("rotated_whole");
  ASSERT_EQ(run(launch(2, port, tiny_train(c, {"--epochs", "1"})), {}, 300).exit_code, 0);
  ASSERT_EQ(run(launch(2, port, tiny_train(w, {"--epochs", "1"})), {}, 300).exit_code, 0);
  const auto resumed_in = [](const std::string& dir) {
    return std::vector<std::string>{
        "--resume_from", dir + "/epoch_0001", "--save_every_steps", "1", "--keep_checkpoints", "1"};
  };
  ProcResult whole = run(launch(2, port, tiny_train(w, resumed_in(w))), {}, 300);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  ProcResult restarted =
      run(launch_restarting(2, port, 1, tiny_train(c, resumed_in(c))), fault_at_step("KILL", 12, 1), 300);
  ASSERT_EQ(restarted.exit_code, 0) << restarted.output;
  EXPECT_FALSE(std::filesystem::exists(c + "/epoch_0001")) << "the test needs the rotation to delete it";
  EXPECT_FALSE(lines_with(restarted.output, "resume_fallback " + c + "/epoch_0001 is gone").empty())
      << restarted.output;
  EXPECT_EQ(fingerprints(whole.output).at(0), fingerprints(restarted.output).at(0));
}

TEST(E2E, KilledDuringSaveAtEachStageThePreviousCheckpointSurvives) {
  // 512 samples, world 2, batch 16: 16 steps per epoch; checkpoints at steps 5 and 10.
  const int port = free_port();
  std::vector<std::string> extra = {"--dataset_size", "512", "--epochs", "1", "--save_every_steps", "5"};
  ProcResult full = run(launch(2, port, tiny_train(fresh_dir("save_full"), extra)), {}, 300);
  ASSERT_EQ(full.exit_code, 0) << full.output;
  auto resume_auto = [&](const std::string& dir) {
    auto args = tiny_train(dir, extra);
    args.insert(args.end(), {"--resume_from", "auto"});
    return run(launch(2, port, args), {}, 300);
  };
  for (const std::string stage : {"files_written", "manifest_written", "renamed"}) {
    SCOPED_TRACE(stage);
    const std::string dir = fresh_dir("save_" + stage);
    ProcResult killed =
        run(launch(2, port, tiny_train(dir, extra)), {{"DDPTRAIN_FAULT_KILL_IN_SAVE", stage + "@10"}}, 300);
    EXPECT_NE(killed.exit_code, 0) << killed.output;
    EXPECT_NE(killed.output.find("FAILED: rank 0"), std::string::npos) << killed.output;
    EXPECT_TRUE(fs::exists(dir + "/step_00000005/manifest.json")) << "the previous checkpoint was damaged";
    // Before the rename the interrupted save is only a leftover; after it, it is complete.
    const bool complete = stage == "renamed";
    EXPECT_EQ(fs::exists(dir + "/step_00000010/manifest.json"), complete);
    EXPECT_EQ(fs::exists(dir + "/.tmp-step_00000010"), !complete);
    ProcResult resumed = resume_auto(dir);
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    // The resume's own line (the save lines name the same folders).
    EXPECT_FALSE(
        lines_with(resumed.output, "resumed from " + dir + (complete ? "/step_00000010" : "/step_00000005"))
            .empty())
        << resumed.output;
    EXPECT_FALSE(fs::exists(dir + "/.tmp-step_00000010")) << "leftover not cleaned";
    EXPECT_EQ(fingerprints(full.output).at(0), fingerprints(resumed.output).at(0)) << resumed.output;
  }
  // A rerun from step 5 (Note [A branch a run abandons]): the first run's step 10 is set
  // aside, not replaced; killed while saving its own step 10, the rerun loses neither: auto
  // resumes step 5 and ends as the uninterrupted run, the first run's step 10 kept aside.
  // (What a crash while replacing a checkpoint of the same name leaves:
  // Checkpoint.KeepsTheNewestAndCleansLeftovers.)
  const std::string dir = fresh_dir("save_replace");
  auto first_args = tiny_train(dir, extra);
  first_args.insert(first_args.end(), {"--max_steps", "10"});
  ProcResult first = run(launch(2, port, first_args), {}, 300);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_TRUE(fs::exists(dir + "/step_00000010/manifest.json")) << first.output;
  auto rerun = first_args;
  rerun.insert(rerun.end(), {"--resume_from", dir + "/step_00000005"});
  ProcResult killed = run(launch(2, port, rerun), {{"DDPTRAIN_FAULT_KILL_IN_SAVE", "files_written@10"}}, 300);
  EXPECT_NE(killed.exit_code, 0) << killed.output;
  EXPECT_FALSE(fs::exists(dir + "/step_00000010"));
  size_t aside = 0;
  for (const auto& e : fs::directory_iterator(dir + "/.superseded"))
    aside += e.path().filename().string().rfind("step_00000010.", 0) == 0 &&
             fs::exists(e.path() / "manifest.json");
  EXPECT_EQ(aside, 1u) << killed.output;
  ProcResult resumed = resume_auto(dir);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_FALSE(lines_with(resumed.output, "resumed from " + dir + "/step_00000005").empty())
      << resumed.output;
  EXPECT_EQ(fingerprints(full.output).at(0), fingerprints(resumed.output).at(0)) << resumed.output;
}

TEST(E2E, RestartBudgetIsExactAndRootCauseIsReported) {
  std::string ckpt = fresh_dir("budget");
  ProcResult r =
      run(launch_restarting(2, free_port(), 2, tiny_train(ckpt)), fault_at_step("THROW", 1, 1, -1), 300);
  std::printf("restart budget 2, a worker that always raises: exit %d after %.1f s (3 attempts)\n",
              r.exit_code, r.seconds);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(lines_with(r.output, "restarting the workers").size(), 2u) << r.output;  // 3 attempts in all
  EXPECT_NE(r.output.find("FAILED: rank 1"), std::string::npos) << r.output;
  EXPECT_NE(
      r.output.find("root cause: [rank 1/2] injected fault (DDPTRAIN_FAULT_THROW_AT_STEP) after step 1"),
      std::string::npos)
      << r.output;
}

namespace {

// Damage without changing the size: the lowest bit of byte 100 flipped.
void flip_a_bit(const std::string& file) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(100);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x01);
  f.seekp(100);
  f.write(&c, 1);
}

}  // namespace

TEST(E2E, DamagedCheckpointStopsTheRunAndChangesNothing) {
  const std::vector<std::string> job = {"train", "--dataset_size", "64", "--image_size",  "8", "--width",
                                        "0.125", "--batch_size",   "16", "--num_workers", "0"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {binary()};
    a.insert(a.end(), job.begin(), job.end());
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  auto listing = [](const std::string& root) {
    std::vector<std::string> v;
    for (const auto& e : fs::recursive_directory_iterator(root))
      if (e.path().filename() != ".lock")  // Note [One run per checkpoint folder]: names its holder
        v.push_back(e.path().string() + ":" +
                    (e.is_regular_file()
                         ? std::to_string(std::hash<std::string>{}(read_text(e.path().string())))
                         : "d"));
    std::sort(v.begin(), v.end());
    return v;
  };
  struct Case {
    std::string name;
    std::function<void(const std::string&)> damage;
    std::string expect;
    int world;
  } cases[] = {
      {"truncated",
       [](const std::string& d) { fs::resize_file(d + "/model.pt", fs::file_size(d + "/model.pt") - 1); },
       "model.pt has", 1},
      {"flipped", [](const std::string& d) { flip_a_bit(d + "/optimizer.pt"); },
       "optimizer.pt fails its CRC-32 check", 1},
      // (Another world size is no damage: Note [Resume at another world size], test_world_change.cpp.)
      {"rng states",
       [](const std::string& d) {
         fs::resize_file(d + "/rng_states.bin", fs::file_size(d + "/rng_states.bin") / 2);
       },
       "rng_states.bin", 2},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::string ckpt = fresh_dir("damaged");
    ProcResult first = run(with({"--epochs", "1", "--checkpoint_dir", ckpt}), {}, 120);
    ASSERT_EQ(first.exit_code, 0) << first.output;
    const std::string dir = ckpt + "/epoch_0001";
    c.damage(dir);
    auto before = listing(ckpt);
    auto args = with({"--epochs", "2", "--checkpoint_dir", ckpt, "--resume_from", dir});
    ProcResult r =
        c.world == 1
            ? run(args, {}, 120)
            : run(launch(2, free_port(), std::vector<std::string>(args.begin() + 1, args.end())), {}, 120);
    std::printf("damaged checkpoint (%s): exit %d after %.1f s\n", c.name.c_str(), r.exit_code, r.seconds);
    EXPECT_EQ(r.exit_code, 2) << "the user's to replace: a launcher's restart would resume another"
                              << r.output;
    EXPECT_FALSE(r.timed_out) << r.output;
    EXPECT_LT(r.seconds, 60.0) << "not refused at once";  // 1-2 s; a wait would be 600 s
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(dir), std::string::npos)
        << "the error does not name the checkpoint: " << r.output;
    EXPECT_EQ(listing(ckpt), before) << "a failed resume changed the checkpoint directory";
    if (c.world != 1) continue;
    // auto falls back to a fresh start (the only checkpoint is damaged) and says why.
    ProcResult a = run(with({"--epochs", "1", "--checkpoint_dir", ckpt, "--resume_from", "auto"}), {}, 60);
    EXPECT_EQ(a.exit_code, 0) << a.output;
    EXPECT_NE(a.output.find("skipping an invalid checkpoint"), std::string::npos) << a.output;
  }
}

// #29 item 5, Note [Checkpoints read once]: --resume_from auto verifies this run's checkpoints
// from the newest down and reads no older one once one verifies (a damaged older checkpoint is
// not even noticed); a damaged newest one is skipped, saying why, for the one before it.
TEST(E2E, ResumeAutoReadsOnlyTheNewestCheckpointThatVerifies) {
  for (const std::string damaged : {"epoch_0001", "epoch_0002"}) {
    SCOPED_TRACE(damaged);
    const std::string ck = fresh_dir("read_once_" + damaged);
    const auto job = [&](std::vector<std::string> extra) {
      std::vector<std::string> a = {binary(),           "train", "--dataset_size", "64", "--image_size",  "8",
                                    "--width",          "0.125", "--batch_size",   "16", "--num_workers", "0",
                                    "--checkpoint_dir", ck};
      a.insert(a.end(), extra.begin(), extra.end());
      return run(a, {}, 120);
    };
    ProcResult first = job({"--epochs", "2"});
    ASSERT_EQ(first.exit_code, 0) << first.output;
    flip_a_bit(ck + "/" + damaged + "/optimizer.pt");
    ProcResult r = job({"--epochs", "3", "--resume_from", "auto"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    if (damaged == "epoch_0001") {
      EXPECT_EQ(r.output.find("skipping an invalid checkpoint"), std::string::npos)
          << "an older checkpoint was read";
      EXPECT_NE(r.output.find("resuming from " + ck + "/epoch_0002"), std::string::npos) << r.output;
    } else {
      EXPECT_NE(r.output.find("skipping an invalid checkpoint: checkpoint '" + ck +
                              "/epoch_0002': optimizer.pt fails its CRC-32 check"),
                std::string::npos)
          << r.output;
      EXPECT_NE(r.output.find("resuming from " + ck + "/epoch_0001"), std::string::npos) << r.output;
    }
  }
}

TEST(E2E, LauncherReportsAKilledWorkerAndLeavesNothingBehind) {
  // World 4: SIGKILL rank 2 mid-training; every process is gone well within 60 s.
  std::string ckpt = fresh_dir("killed");
  std::string out = ckpt + "/launch.log";
  auto worker = tiny_train(ckpt, {"--dataset_size", "2000000", "--epochs", "1"});
  pid_t launcher = spawn(launch(4, free_port(), worker), out);
  std::vector<pid_t> kids = wait_for_children(launcher, 4);
  ASSERT_EQ(kids.size(), 4u);
  // Wait until training runs (a step line), then kill rank 2.
  for (int i = 0; i < 600 && read_text(out).find("samples/s") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  pid_t victim = -1;
  for (pid_t k : kids)
    if (environ_of(k, "RANK") == "2") victim = k;
  ASSERT_NE(victim, -1);
  auto t0 = std::chrono::steady_clock::now();
  ::kill(victim, SIGKILL);
  int code = wait_for(launcher, 60);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("world 4, rank 2 SIGKILLed: launcher exited with %d, %.1f s after the kill\n", code, secs);
  if (code == -1) ::kill(launcher, SIGKILL);
  ASSERT_NE(code, -1) << "launcher still running 60 s after a worker was killed";
  EXPECT_NE(code, 0);
  const std::string log = read_text(out);
  EXPECT_NE(log.find("FAILED: rank 2 (pid " + std::to_string(victim) + ") was killed by signal 9"),
            std::string::npos)
      << log;
  for (pid_t k : kids) EXPECT_FALSE(alive(k)) << "worker " << k << " left behind";
}

TEST(E2E, MasterPortInUseIsAClearErrorInSeconds) {
  // Another program listens on the port (and accepts connections, but never answers).
  ProcResult r;
  int port = 0;
  {
    const ddptrain::testing_common::SilentListener other;
    ASSERT_TRUE(other.ok());
    port = other.port();
    r = run(launch(2, port, tiny_train(fresh_dir("port_in_use"))), {}, 60);
  }
  std::printf("MASTER_PORT in use: exit %d after %.1f s\n", r.exit_code, r.seconds);
  EXPECT_EQ(r.exit_code, 2) << "the environment's error, which a restart would repeat: " << r.output;
  EXPECT_LT(r.seconds, 50.0) << r.output;  // 1.6 s alone; a wait would be --dist_timeout_s (600 s)
  EXPECT_NE(r.output.find("MASTER_PORT " + std::to_string(port) + " is already in use"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("root cause: [rank 0/2] MASTER_PORT"), std::string::npos) << r.output;
}

TEST(E2E, AHungWorkerEndsTheJobWithinTimeoutPlusGrace) {
  // Rank 1 hangs (ignoring SIGTERM) after step 3; rank 0's next collective times out after
  // --dist_timeout_s, it fails naming the operation, and the launcher SIGKILLs the hung rank
  // after its grace period.
  std::string ckpt = fresh_dir("hung");
  auto cmd = launch(2, free_port(), tiny_train(ckpt, {"--dist_timeout_s", "3"}));
  cmd.insert(cmd.begin() + 2, {"--kill_grace_s", "2"});
  ProcResult r = run(cmd, {{"DDPTRAIN_FAULT_HANG_AT_STEP", "3"}, {"DDPTRAIN_FAULT_RANK", "1"}}, 120);
  std::printf("hung worker: launcher exited with %d after %.1f s in all\n", r.exit_code, r.seconds);
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.seconds, 3 + 2 + 20.0) << r.output;  // timeout + grace + start-up and 3 steps
  EXPECT_NE(r.output.find("FAILED: rank 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("buffer broadcast before forward (broadcast_buffers) failed (gloo, timeout 3 s)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("rank 1 (pid"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("did not stop within 2 s of SIGTERM (hung?)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("frame #"), std::string::npos)
      << "a C++ backtrace in a user-facing error: " << r.output;
}

// The workers get --signal_grace_s (not the failure teardown's --kill_grace_s, here 0) to finish
// their step and save. A hang-up (an ssh session gone) and SIGUSR1 (a scheduler's warning before
// its time limit) stop them as SIGTERM does (before, the launcher died of either, and its workers
// with it, unsaved).
TEST(E2E, LauncherForwardsSigterm) {
  for (const int sig : {SIGTERM, SIGHUP, SIGUSR1}) {
    std::string ckpt = fresh_dir("signal" + std::to_string(sig));
    std::string out = ckpt + "/launch.log";
    std::vector<std::string> cmd =
        launch(2, free_port(), tiny_train(ckpt, {"--dataset_size", "2000000", "--log_interval", "1"}));
    cmd.insert(cmd.begin() + 2, {"--kill_grace_s", "0"});
    pid_t launcher = spawn(cmd, out);
    std::vector<pid_t> kids = wait_for_children(launcher, 2);
    ASSERT_EQ(kids.size(), 2u);
    // Signal only once training runs (before that, SIGTERM simply ends a worker).
    for (int i = 0; i < 600 && lines_with(read_text(out), "samples/s").empty(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ::kill(launcher, sig);
    int code = wait_for(launcher, 30);
    if (code == -1) ::kill(launcher, SIGKILL);
    ASSERT_EQ(code, 128 + SIGTERM) << strsignal(sig);
    std::ifstream in(out);
    std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(log.find("forwarding SIGTERM to the workers"), std::string::npos) << log;
    // The workers finished their step and saved where they were (--checkpoint_on_signal).
    EXPECT_NE(log.find("stopping after step"), std::string::npos) << log;
    bool saved = false;
    for (const auto& e : fs::directory_iterator(ckpt))
      saved |= e.path().filename().string().rfind("step_", 0) == 0 && fs::exists(e.path() / "manifest.json");
    EXPECT_TRUE(saved) << log;
    for (pid_t k : kids) EXPECT_FALSE(alive(k)) << "worker " << k << " left behind";
  }
}

TEST(E2E, MismatchedModelsFailOnEveryRankWithoutHanging) {
  // Two ranks started by hand with different --width: both must stop, naming the parameter.
  std::string ckpt = fresh_dir("mismatch");
  const std::string port = std::to_string(free_port());
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> argv = {binary()};
    auto t = tiny_train(ckpt, {"--width", r == 0 ? "0.125" : "0.25", "--dist_timeout_s", "20"});
    argv.insert(argv.end(), t.begin(), t.end());
    pids.push_back(spawn(argv, ckpt + "/rank" + std::to_string(r) + ".log",
                         {{"RANK", std::to_string(r)},
                          {"WORLD_SIZE", "2"},
                          {"MASTER_ADDR", "127.0.0.1"},
                          {"MASTER_PORT", port}}));
  }
  for (int r = 0; r < 2; ++r) {
    int code = wait_for(pids[static_cast<size_t>(r)], 30);
    if (code == -1) ::kill(pids[static_cast<size_t>(r)], SIGKILL);
    std::ifstream in(ckpt + "/rank" + std::to_string(r) + ".log");
    std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(code, -1) << "rank " << r << " still running after 30 s";
    EXPECT_NE(code, 0) << log;
    EXPECT_NE(log.find("do not build the same model"), std::string::npos) << log;
    if (r == 1) {
      EXPECT_NE(log.find("stem.0.weight [8, 3, 3, 3]"), std::string::npos) << log;
    }
  }
}
