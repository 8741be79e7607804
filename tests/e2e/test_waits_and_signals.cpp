// Waits and signals: what a rank does while another makes it wait (a rendezvous a peer never
// reaches, a long checkpoint write, a peer hung in a collective) and on a stop or hang-up signal.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../common/free_port.h"
#include "e2e_helpers.h"
#include "proc.h"

using namespace ddptrain::e2e;

namespace {

// Two ranks of tiny_train(ckpt, flags) started by hand (no launcher tears them down): rank r's
// output in ckpt/rank<r>.log, its error file in ckpt/error<r>.json, `env` added to each.
std::vector<pid_t> spawn_two_ranks(const std::string& ckpt, const std::vector<std::string>& flags,
                                   std::map<std::string, std::string> env) {
  env["WORLD_SIZE"] = "2";
  env["MASTER_ADDR"] = "127.0.0.1";
  env["MASTER_PORT"] = std::to_string(free_port());
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> argv = {binary()};
    const auto t = tiny_train(ckpt, flags);
    argv.insert(argv.end(), t.begin(), t.end());
    env["RANK"] = std::to_string(r);
    env["TORCHELASTIC_ERROR_FILE"] = ckpt + "/error" + std::to_string(r) + ".json";
    pids.push_back(spawn(argv, ckpt + "/rank" + std::to_string(r) + ".log", env));
  }
  return pids;
}

// wait_for(pid, timeout_s); a process still running then is SIGKILLed and reaped (-1 returned).
int wait_or_kill(pid_t pid, int timeout_s) {
  const int code = wait_for(pid, timeout_s);
  if (code == -1) {
    ::kill(pid, SIGKILL);
    wait_for(pid, 10);
  }
  return code;
}

// The message of rank r's error file in ckpt (spawn_two_ranks').
nlohmann::json error_of(const std::string& ckpt, int r) {
  return nlohmann::json::parse(read_text(ckpt + "/error" + std::to_string(r) + ".json"))["message"];
}

// Two ranks under `launch` with a 3 s collective timeout save after step 2 while rank 0's write
// is slowed by 6 s (DDPTRAIN_FAULT_SLOW_SAVE=`slow`): the save is waited for and completes.
void expect_a_slow_save_waited_for(const std::string& name, std::vector<std::string> flags,
                                   const std::string& slow) {
  const std::string ckpt = fresh_dir(name);
  flags.insert(flags.end(), {"--dist_timeout_s", "3", "--save_every_steps", "2", "--max_steps", "3"});
  ProcResult r =
      run(launch(2, free_port(), tiny_train(ckpt, flags)), {{"DDPTRAIN_FAULT_SLOW_SAVE", slow}}, 180);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(ckpt + "/step_00000002/manifest.json")) << r.output;
  EXPECT_NE(r.output.find("injected fault: a save that takes 6 s more"), std::string::npos) << r.output;
}

}  // namespace

// Rank 0 started alone (its peer never came): it serves the rendezvous, so its error says the
// others did not arrive (it asked whether rank 0 was running) and how many joined, within the
// rendezvous timeout (Note [Rendezvous deadline]: 3 s here, while a collective may take 600 s;
// before, the rendezvous waited the collective timeout). Rank 1 alone (no rank 0 serves the
// store) asks whether rank 0 runs, as soon. Without --rendezvous_timeout_s, --dist_timeout_s.
// Ranks 0 and 1 of a world of 3 (rank 2 never came) each say that 2 of 3 joined, and neither
// blames rank 0. Rank 1 whose MASTER_PORT another program holds, which accepts and never
// answers, ends at the deadline too (LibTorch 1.13's requests had no bound of their own). A
// MASTER_ADDR that resolves to nothing is said at once, under a 600 s timeout.
TEST(E2E, ARankAloneAtTheRendezvousSaysWhoDidNotArriveWithinItsTimeout) {
  const std::vector<std::string> own = {"--dist_timeout_s", "600", "--rendezvous_timeout_s", "3"},
                                 shared = {"--dist_timeout_s", "3"};
  const auto alone = [](int rank, const std::vector<std::string>& flags, int port,
                        const std::string& addr = "127.0.0.1") {
    std::vector<std::string> cmd = tiny_train(fresh_dir("alone"), flags);
    cmd.insert(cmd.begin(), binary());
    ProcResult r = run(cmd,
                       {{"RANK", std::to_string(rank)},
                        {"WORLD_SIZE", "2"},
                        {"LOCAL_RANK", std::to_string(rank)},
                        {"LOCAL_WORLD_SIZE", "2"},
                        {"MASTER_ADDR", addr},
                        {"MASTER_PORT", std::to_string(port)}},
                       120);
    std::printf("rank %d alone, %s %s: exit %d after %.1f s\n", rank, flags[flags.size() - 2].c_str(),
                flags.back().c_str(), r.exit_code, r.seconds);
    EXPECT_FALSE(r.timed_out) << r.output;
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_LT(r.seconds, 40.0) << r.output;  // 3 s and start-up; a wait would be 600 s
    return r;
  };
  {
    const ddptrain::testing_common::SilentListener other;
    ASSERT_TRUE(other.ok());
    const ProcResult r = alone(1, own, other.port());
    EXPECT_NE(r.output.find("rendezvous at 127.0.0.1:" + std::to_string(other.port()) + " failed"),
              std::string::npos)
        << r.output;
  }
  {  // a name that resolves to nothing: said at once, not waited for (Note [A client waits for the store's
     // server])
    const ProcResult r = alone(1, {"--dist_timeout_s", "600"}, free_port(), "no-such-host.invalid");
    EXPECT_NE(r.output.find("MASTER_ADDR no-such-host.invalid does not resolve"), std::string::npos)
        << r.output;
    EXPECT_LT(r.seconds, 30.0) << r.output;
  }
  for (const auto& [rank, flags] : {std::pair{0, own}, std::pair{1, own}, std::pair{0, shared}}) {
    const ProcResult r = alone(rank, flags, free_port());
    if (rank == 0) {  // local rank 0 says what it waits for
      EXPECT_NE(r.output.find("(at most 3 s)"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find("1 of the job's 2 ranks joined within 3 s"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find("this rank serves the rendezvous and the others did not all arrive"),
                std::string::npos)
          << r.output;
    } else {
      EXPECT_NE(r.output.find("is rank 0 running"), std::string::npos) << r.output;
    }
  }
  const std::string dir = fresh_dir("two_of_three"), port = std::to_string(free_port());
  std::vector<pid_t> pids;
  for (const std::string rank : {"0", "1"}) {
    std::vector<std::string> argv = tiny_train(dir, own);
    argv.insert(argv.begin(), binary());
    pids.push_back(spawn(argv, dir + "/rank" + rank + ".log",
                         {{"RANK", rank},
                          {"WORLD_SIZE", "3"},
                          {"LOCAL_RANK", rank},
                          {"LOCAL_WORLD_SIZE", "3"},
                          {"MASTER_ADDR", "127.0.0.1"},
                          {"MASTER_PORT", port}}));
  }
  for (size_t rank = 0; rank < pids.size(); ++rank) {
    const int code = wait_or_kill(pids[rank], 60);
    const std::string log = read_text(dir + "/rank" + std::to_string(rank) + ".log");
    EXPECT_NE(code, -1) << "rank " << rank << " still waited after 60 s: " << log;
    EXPECT_NE(code, 0) << log;
    EXPECT_NE(log.find("2 of the job's 3 ranks joined within 3 s"), std::string::npos) << log;
    EXPECT_NE(log.find("are the job's 3 ranks started, with this MASTER_ADDR/MASTER_PORT and WORLD_SIZE?"),
              std::string::npos)
        << log;
    EXPECT_EQ(log.find("is rank 0 running"), std::string::npos) << log;
  }
}

// The other ranks wait at a save's end while rank 0 writes: a write longer than a short
// --dist_timeout_s (set to catch hangs sooner) is waited for, up to SaveOptions::write_wait
// (rank 1 failed the barrier and the launcher killed rank 0 in its save: the save was lost).
TEST(E2E, ASaveLongerThanTheCollectiveTimeoutIsWaitedFor) {
  expect_a_slow_save_waited_for("slow_save", {}, "6@2");
}

// Under ZeRO, the optimizer's shards are broadcast to rank 0 one by one while it writes them: the
// others wait for each write on the store (PartFiles::sync), not in the next collective, whose
// short --dist_timeout_s a write of rank 0's passes (a 6 s write of model.pt under a 3 s
// timeout failed the save, since the shard broadcast came next).
TEST(E2E, AZeroSavesPartsLongerThanTheCollectiveTimeoutAreWaitedFor) {
  expect_a_slow_save_waited_for("slow_zero_save", {"--zero_stage", "1"}, "6@2@written:model.pt");
}

// Note [A second stop signal]: rank 0 waits in a collective for rank 1, which hangs (ignoring
// signals); started by hand, no launcher tears it down. A first SIGINT asks for a stop it cannot
// reach (rank 0 lives on); a second one 3 s later ends it by SIGINT within seconds (it waited
// for the 600 s timeout, or a SIGKILL).
TEST(E2E, ASecondStopSignalEndsARankHeldInACollective) {
  const std::string ckpt = fresh_dir("second_signal");
  const std::vector<pid_t> pids = spawn_two_ranks(
      ckpt, {"--log_interval", "1"}, {{"DDPTRAIN_FAULT_HANG_AT_STEP", "2"}, {"DDPTRAIN_FAULT_RANK", "1"}});
  const auto log_of_rank0 = [&] {
    std::ifstream in(ckpt + "/rank0.log");
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  // Step 2's line needs rank 1 (its numbers are reduced): the run is then at step 2's end.
  for (int i = 0; i < 600 && log_of_rank0().find("global step 1/") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_NE(log_of_rank0().find("global step 1/"), std::string::npos) << log_of_rank0();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  ::kill(pids[0], SIGINT);
  std::this_thread::sleep_for(std::chrono::seconds(3));
  EXPECT_TRUE(alive(pids[0])) << "one signal ended it: " << log_of_rank0();
  ::kill(pids[0], SIGINT);
  const int code = wait_for(pids[0], 15);
  for (pid_t p : pids) ::kill(p, SIGKILL);
  wait_for(pids[1], 10);
  EXPECT_EQ(code, 128 + SIGINT) << log_of_rank0();
}

// A bare `ddptrain train` whose terminal hangs up (ssh gone) stops after its step and saves, as
// under `ddptrain launch` (SIGHUP's default ended it unsaved); under nohup (SIGHUP ignored when it
// starts) the run goes on. So do a quit (torchrun forwards it as it came; its default dumped core)
// and SIGUSR1, a scheduler's warning before its time limit (its default ended the run unsaved).
TEST(E2E, AHangUpStopsABareRunWithItsCheckpointUnlessIgnored) {
  for (const auto& [sig, ignored] : std::vector<std::pair<int, bool>>{
           {SIGHUP, false}, {SIGHUP, true}, {SIGQUIT, false}, {SIGUSR1, false}}) {
    const std::string ckpt =
        fresh_dir(std::string(ignored ? "hangup_nohup" : "hangup") + std::to_string(sig));
    std::string cmd = std::string(ignored ? "trap '' HUP; " : "") + "exec '" + binary() + "'";
    for (const std::string& a : tiny_train(ckpt, {"--dataset_size", "2000000", "--log_interval", "1"}))
      cmd += " '" + a + "'";
    const pid_t pid = spawn({"/bin/sh", "-c", cmd}, ckpt + "/out.log");
    const auto log = [&] { return read_text(ckpt + "/out.log"); };
    for (int i = 0; i < 600 && log().find("global step 2/") == std::string::npos; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_NE(log().find("global step 2/"), std::string::npos) << log();
    ::kill(pid, sig);
    const int code = wait_for(pid, ignored ? 3 : 60);
    if (ignored) {
      EXPECT_EQ(code, -1) << "a hang-up under nohup ended the run: " << log();
      ::kill(pid, SIGKILL);
      wait_for(pid, 10);
      continue;
    }
    EXPECT_EQ(code, 128 + sig) << log();
    EXPECT_NE(log().find("stopping after step"), std::string::npos) << log();
    bool saved = false;
    for (const auto& e : std::filesystem::directory_iterator(ckpt))
      saved |= e.path().filename().string().rfind("step_", 0) == 0 &&
               std::filesystem::exists(e.path() / "manifest.json");
    EXPECT_TRUE(saved) << log();
  }
}

// Note [A rank's failure ends the job]: one rank fails (an error after step 2) while the other is
// held where no backend error reaches it (here: its own code, hung and deaf to signals; on NCCL:
// a collective, until --dist_timeout_s). The held one ends within seconds, exit 1, its error
// file naming the failed rank's error as the cause; the failed rank's names its own. Both ways:
// rank 0 serves the store, so its failure must be read before it ends.
TEST(E2E, ARanksErrorEndsAPeerHeldElsewhereWithinSeconds) {
  for (const int failing : {1, 0}) {
    const int held = 1 - failing;
    const std::string ckpt = fresh_dir("peer_failure_" + std::to_string(failing));
    const std::vector<pid_t> pids = spawn_two_ranks(ckpt, {"--log_interval", "1"},
                                                    {{"DDPTRAIN_FAULT_THROW_AT_STEP", "2"},
                                                     {"DDPTRAIN_FAULT_RANK", std::to_string(failing)},
                                                     {"DDPTRAIN_FAULT_HANG_AT_STEP", "2"},
                                                     {"DDPTRAIN_FAULT_HANG_RANK", std::to_string(held)}});
    const auto start = std::chrono::steady_clock::now();
    const int failed_code = wait_or_kill(pids[failing], 120);
    const int held_code = wait_or_kill(pids[held], 30);
    const double held_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string logs = read_text(ckpt + "/rank0.log") + read_text(ckpt + "/rank1.log");
    EXPECT_EQ(failed_code, 1) << logs;
    EXPECT_EQ(held_code, 1) << "the held rank did not end by itself: " << logs;
    EXPECT_LT(held_s, 40.0)
        << logs;  // about 6 s: seen within 0.5 s, then 5 s of grace (slack for a loaded machine)
    const nlohmann::json held_error = error_of(ckpt, held);
    EXPECT_NE(held_error["message"].get<std::string>().find("the job failed first on rank " +
                                                            std::to_string(failing) + "/2: injected fault"),
              std::string::npos)
        << held_error;
    EXPECT_EQ(held_error["extraInfo"]["secondary"], "true") << held_error;
    EXPECT_NE(error_of(ckpt, failing)["message"].get<std::string>().find("injected fault"), std::string::npos)
        << logs;
  }
}

// Note [Bounded store requests]: rank 0 stopped (SIGSTOP: to its peers, a host that is gone)
// while rank 1 trains. Rank 1's next collective fails at --dist_timeout_s (20 s), and then it
// ends within seconds, exit 1, its error file naming the collective. Each request its failure
// made of the store (the flight recorder's flag, the announcement, the watches' last polls as
// it ends) waited for an answer with no bound (Note [Bounded store requests]): rank 1 waited for
// ever (killed at 200 s); now it ends about 4 s after its collective failed.
TEST(E2E, ARankWhoseRankZeroIsGoneEndsSoonAfterItsCollectiveFails) {
  const std::string ckpt = fresh_dir("rank0_gone");
  const std::vector<pid_t> pids =
      spawn_two_ranks(ckpt,
                      {"--dist_timeout_s", "20", "--dataset_size", "2000000", "--epochs", "1",
                       "--metrics_file", ckpt + "/m.jsonl", "--log_interval", "1"},
                      {});
  for (int i = 0; i < 600 && step_values(ckpt + "/m.jsonl", "loss").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_FALSE(step_values(ckpt + "/m.jsonl", "loss").empty()) << read_text(ckpt + "/rank1.log");
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(pids[0], SIGSTOP);
  const int code = wait_or_kill(pids[1], 200);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::kill(pids[0], SIGKILL);
  wait_for(pids[0], 10);
  std::printf("rank 0 SIGSTOPped: rank 1 ended (exit %d) %.1f s later\n", code, secs);
  const std::string log = read_text(ckpt + "/rank1.log");
  EXPECT_EQ(code, 1) << log;
  // 20 s (the watch's request went unanswered 10 s after the stop, and the later ones fail at
  // once), then the flight recorder's 3 s wait for records: slack for a loaded machine.
  EXPECT_LT(secs, 20 + 30.0) << log;
  const std::string error = error_of(ckpt, 1)["message"].get<std::string>();
  EXPECT_NE(error.find("timeout 20 s"), std::string::npos) << error;
}

// Rank 0 fails writing a checkpoint (a full disk) while rank 1 waits on the store for that write
// (PartFiles::sync): rank 1 ends at once, exit 1, its error naming rank 0's as the cause (it
// said only that the store went away, "rank 0 probably died"; under torchrun's agent store it
// waited the 30 minutes of a save).
TEST(E2E, ARankWaitingForRankZerosWriteEndsNamingRankZerosError) {
  const std::string ckpt = fresh_dir("failed_write");
  const std::vector<pid_t> pids = spawn_two_ranks(ckpt, {"--save_every_steps", "2", "--max_steps", "3"},
                                                  {{"DDPTRAIN_FAULT_THROW_IN_SAVE", "written:model.pt@2"}});
  const int code0 = wait_or_kill(pids[0], 120);
  const int code1 = wait_or_kill(pids[1], 30);
  const std::string logs = read_text(ckpt + "/rank0.log") + read_text(ckpt + "/rank1.log");
  EXPECT_EQ(code0, 1) << logs;
  EXPECT_EQ(code1, 1) << logs;
  const std::string error1 = error_of(ckpt, 1)["message"].get<std::string>();
  EXPECT_NE(error1.find("waiting for rank 0: checkpoint step_00000002 at step 2"), std::string::npos)
      << error1;
  EXPECT_NE(error1.find("the job failed first on rank 0/2: injected fault (DDPTRAIN_FAULT_THROW_IN_SAVE)"),
            std::string::npos)
      << error1;
}

// Note [Agreed stop] seen by the launcher: SIGTERM sent to one worker alone (not to the launcher,
// --max_restarts 1) stops both ranks after the same step, saved once. Rank 1 exits 143 with the
// stop in its error file, which the launcher takes for the job's stop: exit 143, no restart. It
// took it for a failure and restarted the group, which resumed and trained on. The same holds
// for a node whose launcher received no signal while another node's did.
TEST(E2E, AWorkerStoppedOnItsOwnSignalStopsTheLaunchWithoutARestart) {
  const std::string ckpt = fresh_dir("stop_one_worker"), log = fresh_dir("stop_one_worker_log") + "/out.log";
  const pid_t launcher =
      spawn(launch_restarting(2, free_port(), 1,
                              tiny_train(ckpt, {"--dataset_size", "2000000", "--log_interval", "1"})),
            log);
  const auto out = [&] { return read_text(log); };
  for (int i = 0; i < 1200 && out().find("global step 2/") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_NE(out().find("global step 2/"), std::string::npos) << out();
  pid_t rank1 = -1;
  for (const pid_t p : wait_for_children(launcher, 2))
    if (environ_of(p, "RANK") == "1") rank1 = p;
  ASSERT_NE(rank1, -1) << out();
  ::kill(rank1, SIGTERM);
  EXPECT_EQ(wait_or_kill(launcher, 90), 128 + SIGTERM) << out();
  int saved = 0;
  for (const auto& e : std::filesystem::directory_iterator(ckpt))
    saved += e.path().filename().string().rfind("step_", 0) == 0 &&
             std::filesystem::exists(e.path() / "manifest.json");
  EXPECT_EQ(saved, 1) << out();
}
