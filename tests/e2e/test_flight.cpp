// The flight recorder on real hangs (#16 item 3, Note [Flight recorder]): a rank that hangs in
// its step loop (the fault hook) is named as behind, with its phase and the collective the
// others wait in, from its own record written by its watchdog thread while its main thread
// sleeps; a SIGSTOPped rank is named as leaving no record; a rank that issues a collective
// the others do not is named with both collectives. Each within --dist_timeout_s + 10 s,
// read from `ddptrain inspect hang DIR` and the records' JSON. Under `launch --stall_s`, the
// launcher ends a hang after that long, with the records and the verdict.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "e2e_helpers.h"
#include "proc.h"

using namespace ddptrain::e2e;
namespace fs = std::filesystem;

namespace {

// `ddptrain launch` of 2 ranks that kills the others 2 s after one fails (with --stall_s S > 0:
// and watches for stalls).
std::vector<std::string> launch_two(const std::vector<std::string>& worker,
                                    const std::string& stall_s = "0") {
  std::vector<std::string> a = {
      binary(),         "launch", "--nproc_per_node", "2",    "--master_port", std::to_string(free_port()),
      "--kill_grace_s", "2",      "--stall_s",        stall_s};
  a.insert(a.end(), worker.begin(), worker.end());
  return a;
}

}  // namespace

TEST(Flight, AHungRankIsNamedWithItsPhaseAndTheCollective) {
  const std::string ck = fresh_dir("flight_hang");
  ProcResult r = run(launch_two(tiny_train(ck, {"--dist_timeout_s", "8"})),
                     {{"DDPTRAIN_FAULT_HANG_AT_STEP", "3"}, {"DDPTRAIN_FAULT_RANK", "1"}}, 120);
  std::printf("rank 1 hangs after step 3: the job ended (exit %d) after %.1f s\n", r.exit_code, r.seconds);
  EXPECT_NE(r.exit_code, 0) << r.output;
  // --dist_timeout_s, the record's and the kill's waits (about 11 s in all), and the start-up:
  // slack for a slow machine running another test beside it; the default timeout is 600 s.
  EXPECT_LT(r.seconds, 8 + 10 + 30) << r.output;
  ASSERT_TRUE(fs::exists(ck + "/flight_rank1.json"))
      << "the hung rank's watchdog wrote nothing: " << r.output;
  const nlohmann::json hung = nlohmann::json::parse(read_text(ck + "/flight_rank1.json"));
  EXPECT_EQ(hung.at("phase"), "step end");  // the hook hangs after the optimizer step, in its end
  ProcResult v = run({binary(), "inspect", "hang", ck}, {}, 60);
  EXPECT_EQ(v.exit_code, 0) << v.output;
  EXPECT_NE(v.output.find("rank 1 is behind: rank 0 waits in collective #"), std::string::npos) << v.output;
  EXPECT_NE(v.output.find("rank 1 completed #"), std::string::npos) << v.output;
  EXPECT_NE(v.output.find("has been in step end (step 3)"), std::string::npos) << v.output;
  EXPECT_EQ(v.output.find("stop vote"), std::string::npos)
      << "an asynchronous vote not yet waited on is not where a rank waits: " << v.output;
  EXPECT_NE(r.output.find("flight recorder (records in " + ck), std::string::npos)
      << "the log gives no verdict";
  // Note [An earlier start's flight records]: the next start in the folder, refused after its
  // claim (its data is not there), keeps the hang's records: moved to .flight.previous, where
  // the verdict reads as before (they were removed at any start, and a restart after the hang
  // lost them too), and `inspect hang DIR` says where they went.
  ProcResult again = run(launch_two({"train", "--model", "gpt", "--dataset", "token_shards", "--data_path",
                                     "/no/such_*.bin", "--checkpoint_dir", ck, "--resume_from", "auto"}),
                         {}, 60);
  EXPECT_EQ(again.exit_code, 2) << again.output;
  EXPECT_EQ(again.output.find("skipping an invalid checkpoint"), std::string::npos)
      << "the records' folder was listed as a checkpoint: " << again.output;
  const std::string previous = ck + "/.flight.previous";
  EXPECT_NE(again.output.find("an earlier start's flight records (ranks 0,1) moved to " + previous),
            std::string::npos)
      << again.output;
  for (int rank : {0, 1}) {
    EXPECT_FALSE(fs::exists(ck + "/flight_rank" + std::to_string(rank) + ".json"));
    EXPECT_TRUE(fs::exists(previous + "/flight_rank" + std::to_string(rank) + ".json"));
  }
  ProcResult where = run({binary(), "inspect", "hang", ck}, {}, 60);
  EXPECT_EQ(where.exit_code, 2) << where.output;
  EXPECT_NE(where.output.find("a later start moved an earlier hang's records to '" + previous + "'"),
            std::string::npos)
      << where.output;
  ProcResult kept = run({binary(), "inspect", "hang", previous}, {}, 60);
  EXPECT_NE(kept.output.find("rank 1 is behind: rank 0 waits in collective #"), std::string::npos)
      << kept.output;
}

// Note [Stall seen by the launcher]: with --stall_s 3 the launcher ends a hang long before the
// collective timeout (120 s here), with both ranks' records (the hung rank's by its watchdog).
TEST(Flight, TheLauncherSeesAStallLongBeforeTheTimeout) {
  const std::string ck = fresh_dir("flight_stall");
  ProcResult r = run(launch_two(tiny_train(ck, {"--dist_timeout_s", "120"}), "3"),
                     {{"DDPTRAIN_FAULT_HANG_AT_STEP", "3"}, {"DDPTRAIN_FAULT_RANK", "1"}}, 110);
  std::printf("rank 1 hangs after step 3, --stall_s 3: the job ended (exit %d) after %.1f s\n", r.exit_code,
              r.seconds);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_LT(r.seconds, 40) << "the launcher did not act on the stall: " << r.output;
  for (int rank : {0, 1}) {
    const std::string path = ck + "/flight_rank" + std::to_string(rank) + ".json";
    ASSERT_TRUE(fs::exists(path)) << "rank " << rank << " wrote no record: " << r.output;
    const nlohmann::json rec = nlohmann::json::parse(read_text(path));
    EXPECT_EQ(rec.at("reason").get<std::string>().rfind("the launcher saw a stall: rank 0 has waited ", 0),
              0u)
        << rec;
    if (rank == 1) {
      EXPECT_EQ(rec.at("phase"), "step end");
    }
  }
  ProcResult v = run({binary(), "inspect", "hang", ck}, {}, 60);
  EXPECT_NE(v.output.find("rank 1 is behind: rank 0 waits in collective #"), std::string::npos) << v.output;
  EXPECT_NE(r.output.find("launch: FAILED: the job stalled (rank 0 has waited "), std::string::npos)
      << r.output;
}

TEST(Flight, AHealthyRunUnderAStallWatchIsLeftAlone) {
  const std::string ck = fresh_dir("flight_calm");
  ProcResult r = run(launch_two(tiny_train(ck, {"--dist_timeout_s", "120"}), "5"), {}, 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(ck + "/flight_rank0.json")) << r.output;
  EXPECT_FALSE(fs::exists(ck + "/flight_rank1.json")) << r.output;
}

TEST(Flight, AStoppedRankIsNamedAsLeavingNoRecord) {
  const std::string ck = fresh_dir("flight_stop");
  const std::vector<std::string> args =
      launch_two(tiny_train(ck, {"--dataset_size", "2000000", "--epochs", "1", "--dist_timeout_s", "8",
                                 "--metrics_file", ck + "/m.jsonl", "--log_interval", "1"}));
  const pid_t launcher = spawn(args, ck + "/out.log");
  const std::vector<pid_t> ranks = wait_for_children(launcher, 2, 60);
  ASSERT_EQ(ranks.size(), 2u);
  for (int i = 0; i < 600 && step_values(ck + "/m.jsonl", "loss").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_FALSE(step_values(ck + "/m.jsonl", "loss").empty()) << read_text(ck + "/out.log");
  // Rank 1 is the launcher's second child (started in rank order).
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(ranks[1], SIGSTOP);
  const int code = wait_for(launcher, 60);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::kill(ranks[1], SIGKILL);
  if (code == -1) ::kill(-launcher, SIGKILL);
  std::printf("rank 1 SIGSTOPped: the job ended (exit %d) %.1f s later\n", code, secs);
  EXPECT_NE(code, 0);
  // --dist_timeout_s, then the record's 3 s, the failure's 2 s and the kill's 2 s (about 15 s),
  // with slack for a slow, loaded machine: the default timeout is 600 s.
  EXPECT_LT(secs, 8 + 40.0) << read_text(ck + "/out.log");
  EXPECT_FALSE(fs::exists(ck + "/flight_rank1.json"));
  ProcResult v = run({binary(), "inspect", "hang", ck}, {}, 60);
  EXPECT_EQ(v.exit_code, 0) << v.output;
  EXPECT_NE(v.output.find("rank 1 left no record (stopped or killed)"), std::string::npos) << v.output;
}

TEST(Flight, RanksThatIssueDifferentCollectivesAreNamed) {
  const std::string ck = fresh_dir("flight_mismatch");
  ProcResult r = run(launch_two(tiny_train(ck, {"--dist_timeout_s", "8"})),
                     {{"DDPTRAIN_FAULT_MISMATCH_AT_STEP", "3"}, {"DDPTRAIN_FAULT_RANK", "1"}}, 120);
  std::printf("rank 1 issues a broadcast of its own before step 3: the job ended (exit %d) after %.1f s\n",
              r.exit_code, r.seconds);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.seconds, 8 + 10 + 30) << r.output;  // as a hang's: slack for a slow machine
  // Gloo's enforce in a backend thread ends the rank through std::terminate: its message is the
  // error reported (it was an abort: a core and "killed by signal 6").
  EXPECT_EQ(r.output.find("killed by signal"), std::string::npos) << r.output;
  ProcResult v = run({binary(), "inspect", "hang", ck}, {}, 60);
  EXPECT_EQ(v.exit_code, 0) << v.output;
  EXPECT_NE(v.output.find("ranks disagree at #"), std::string::npos) << v.output;
  EXPECT_NE(v.output.find("broadcast (injected fault: a broadcast only this rank issues)"), std::string::npos)
      << v.output;
}

TEST(Flight, InspectHangWithoutRecordsIsAUsageError) {
  ProcResult v = run({binary(), "inspect", "hang", fresh_dir("flight_none")}, {}, 60);
  EXPECT_EQ(v.exit_code, 2) << v.output;
  EXPECT_NE(v.output.find("no flight_rank<r>.json in"), std::string::npos) << v.output;
}
