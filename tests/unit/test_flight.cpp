// The flight recorder's ring and the verdict it leads to (Note [Flight recorder]): records made
// by FlightRecorder itself for ranks of a job, then hang_verdict names the rank behind, the
// ranks that left no record, and ranks that disagree on a collective; the launcher's stall watch
// reads the ranks' progress and asks for the records (Note [Stall seen by the launcher]).
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "dist/flight_recorder.h"
#include "dist/flight_verdict.h"
#include "dist/flight_watchdog.h"
#include "dist_harness.h"
#include "launch/output_sink.h"
#include "launch/stall_watch.h"

using namespace ddptrain;

namespace {

// A rank that completed collectives 1..done (gradient bucket 0 of steps 1..done), then, with
// `vote`, issued an asynchronous stop vote it has not waited on yet (as every CPU step does),
// and unless `op` is empty blocks in the next collective (`op`, `what`), as DistContext::wait.
nlohmann::json record(int rank, int world, int64_t done, const std::string& op = "",
                      const std::string& what = "", const char* phase = "backward", bool vote = false) {
  FlightRecorder r(8);
  const at::Tensor t = at::zeros({4});
  for (int64_t s = 1; s <= done; ++s) {
    r.set_phase("backward", s);
    const int64_t seq = r.issue("all_reduce", "gradient bucket 0", {t});
    r.complete(seq, true);
  }
  r.set_phase(phase, done + 1);
  static int works[2];
  if (vote) r.bind(&works[0], r.issue("all_reduce", "stop vote", {t}));
  if (!op.empty()) {
    r.bind(&works[1], r.issue(op.c_str(), what, {t}));
    r.wait_begins(&works[1]);
  }
  return r.to_json(rank, world, "test");
}

}  // namespace

TEST(FlightRecorder, KeepsTheLastCollectivesWithTheirStatesAndThePhase) {
  FlightRecorder r(3);
  const at::Tensor t = at::zeros({4, 2});
  r.set_phase("forward", 7);
  int works[5];
  for (int i = 0; i < 5; ++i) {
    const int64_t seq = r.issue("broadcast", "buffer broadcast", {t});
    EXPECT_EQ(seq, i + 1);
    r.bind(&works[i], seq);
  }
  r.complete_work(&works[3], true);
  r.complete_work(&works[4], false);
  const nlohmann::json j = r.to_json(1, 2, "why");
  ASSERT_EQ(j.at("entries").size(), 3u) << "keeps the last 3";
  EXPECT_EQ(j["entries"][0]["seq"], 3);
  EXPECT_EQ(j["entries"][0]["state"], "issued");
  EXPECT_EQ(j["entries"][1]["state"], "completed");
  EXPECT_EQ(j["entries"][2]["state"], "failed");
  EXPECT_EQ(j["entries"][2]["numel"], 8);
  EXPECT_EQ(j["entries"][2]["phase"], "forward");
  EXPECT_EQ(j["entries"][2]["step"], 7);
  EXPECT_EQ(j["rank"], 1);
  EXPECT_EQ(j["reason"], "why");
  FlightRecorder off(0);
  EXPECT_EQ(off.issue("all_reduce", "x", {t}), 0);
  EXPECT_TRUE(off.to_json(0, 1, "").at("entries").empty());
}

TEST(FlightVerdict, NamesTheRankBehindAndWhereTheOthersWait) {
  const std::map<int, nlohmann::json> recs = {{0, record(0, 3, 5, "all_reduce", "gradient bucket 0")},
                                              {1, record(1, 3, 5, "", "", "data")},
                                              {2, record(2, 3, 5, "all_reduce", "gradient bucket 0")}};
  const std::string v = hang_verdict(recs, 3);
  EXPECT_NE(
      v.find("rank 1 is behind: ranks 0,2 wait in collective #6 (all_reduce, gradient bucket 0, step 6); "
             "rank 1 completed #5 and has been in data (step 6) for "),
      std::string::npos)
      << v;
  EXPECT_EQ(v.find("left no record"), std::string::npos) << v;
}

// A CPU step leaves its stop vote issued and not waited on until the next step: the verdict
// goes by the collective a rank blocks in, not by the oldest one still issued (it said "no rank
// is behind: ranks 0,1 wait in collective #6 (all_reduce, stop vote ...)").
TEST(FlightVerdict, AnAsynchronousCollectiveNotWaitedOnIsNotWhereARankWaits) {
  const std::map<int, nlohmann::json> recs = {
      {0, record(0, 2, 5, "all_reduce", "gradient bucket 0", "backward", true)},
      {1, record(1, 2, 5, "", "", "data", true)}};
  const std::string v = hang_verdict(recs, 2);
  EXPECT_NE(v.find("rank 1 is behind: rank 0 waits in collective #7 (all_reduce, gradient bucket 0, step 6); "
                   "rank 1 completed #5 and has been in data (step 6) for "),
            std::string::npos)
      << v;
  // A record of a wait that failed (the timeout): the failed collective is where it waited.
  FlightRecorder failed(8);
  const at::Tensor t = at::zeros({4});
  int work = 0;
  failed.bind(&work, failed.issue("all_reduce", "stop vote", {t}));
  int bucket = 0;
  failed.bind(&bucket, failed.issue("all_reduce", "gradient bucket 3", {t}));
  failed.wait_begins(&bucket);
  failed.complete_work(&bucket, false);
  const std::string f =
      hang_verdict({{0, failed.to_json(0, 2, "timeout")}, {1, record(1, 2, 0, "", "", "data")}}, 2);
  EXPECT_NE(f.find("rank 1 is behind: rank 0 waits in collective #2 (all_reduce, gradient bucket 3"),
            std::string::npos)
      << f;
}

TEST(FlightVerdict, NamesARankThatLeftNoRecord) {
  const std::string v = hang_verdict({{0, record(0, 2, 5, "all_reduce", "gradient bucket 0")}}, 2);
  EXPECT_NE(v.find("rank 1 left no record (stopped or killed)"), std::string::npos) << v;
}

TEST(FlightVerdict, NamesRanksThatDisagreeOnACollective) {
  const std::string v = hang_verdict({{0, record(0, 2, 5, "broadcast", "buffer broadcast")},
                                      {1, record(1, 2, 5, "all_reduce", "gradient bucket 2")}},
                                     2);
  EXPECT_NE(v.find("ranks disagree at #6: rank 0 broadcast (buffer broadcast) vs rank 1 all_reduce (gradient "
                   "bucket 2)"),
            std::string::npos)
      << v;
  const std::string calm = hang_verdict({{0, record(0, 2, 5)}, {1, record(1, 2, 5)}}, 2);
  EXPECT_NE(calm.find("no hang on record"), std::string::npos) << calm;
}

namespace {

std::string scratch_dir(const std::string& name) {
  const std::string d = testing_dist::temp_dir(name);
  std::filesystem::create_directories(d);
  return d;
}

void write_json(const std::string& path, const nlohmann::json& j) { std::ofstream(path) << j.dump() << '\n'; }

// A progress file as a rank's watchdog writes it (Note [Stall seen by the launcher]).
nlohmann::json progress_of(int rank, const FlightRecorder& r, const std::string& flight_dir) {
  nlohmann::json p = r.progress();
  p["rank"] = rank;
  p["flight_dir"] = flight_dir;
  return p;
}

}  // namespace

TEST(FlightRecorder, ProgressNamesTheCollectiveTheRankBlocksOn) {
  FlightRecorder r(8);
  const at::Tensor t = at::zeros({4});
  r.set_phase("backward", 4);
  r.complete(r.issue("all_reduce", "gradient bucket 0", {t}), true);
  int vote = 0, bucket = 0;
  r.bind(&vote, r.issue("all_reduce", "stop vote", {t}));  // asynchronous: waited a step later
  r.bind(&bucket, r.issue("all_reduce", "gradient bucket 1", {t}));
  EXPECT_TRUE(r.progress().at("waiting").is_null()) << "issued, but nobody waits on them yet";
  r.wait_begins(&bucket);
  const nlohmann::json p = r.progress();
  EXPECT_EQ(p.at("last_completed"), 1);
  EXPECT_EQ(p.at("waiting").at("seq"), 3);
  EXPECT_EQ(p.at("waiting").at("what"), "gradient bucket 1");
  EXPECT_EQ(p.at("phase"), "backward");
  EXPECT_GT(p.at("waiting").at("since").get<double>(), 1.7e9);
  r.complete_work(&bucket, true);
  EXPECT_TRUE(r.progress().at("waiting").is_null()) << "the wait ended";
  EXPECT_EQ(r.progress().at("last_completed"), 3);
}

TEST(StallWatch, ARankWaitingPastTheLimitBringsTheRecordsAndTheVerdict) {
  const std::string launch = scratch_dir("stall_launch"), flights = scratch_dir("stall_flights");
  // Rank 0 waits in collective #6 since "now"; rank 1 is in data loading.
  FlightRecorder r0(8), r1(8);
  const at::Tensor t = at::zeros({4});
  for (FlightRecorder* r : {&r0, &r1})
    for (int s = 1; s <= 5; ++s) r->complete(r->issue("all_reduce", "gradient bucket 0", {t}), true);
  r0.set_phase("backward", 6);
  int work = 0;
  r0.bind(&work, r0.issue("all_reduce", "gradient bucket 0", {t}));
  r0.wait_begins(&work);
  r1.set_phase("data", 6);
  write_json(flight_progress_path(launch, 0), progress_of(0, r0, flights));
  write_json(flight_progress_path(launch, 1), progress_of(1, r1, flights));

  OutputSink err(2);
  StallWatch patient(launch, 3600, {0, 1}, 2, err);
  EXPECT_FALSE(patient.poll());
  EXPECT_FALSE(patient.stalled()) << "rank 0 has waited less than an hour";
  EXPECT_FALSE(std::filesystem::exists(flight_request_path(launch)));

  StallWatch watch(launch, 1, {0, 1}, 2, err);
  EXPECT_FALSE(watch.poll());
  EXPECT_FALSE(watch.stalled()) << "a wait is timed from when the launcher first saw it";
  StallWatch gone(launch, 1, {0, 1}, 2, err);
  EXPECT_FALSE(gone.poll());
  gone.worker_exited(0);
  EXPECT_FALSE(std::filesystem::exists(flight_progress_path(launch, 0)));
  write_json(flight_progress_path(launch, 0), progress_of(0, r0, flights));  // as if written late
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_FALSE(gone.poll());
  EXPECT_FALSE(gone.stalled()) << "rank 0's worker has exited: its last progress is not watched";
  EXPECT_FALSE(watch.poll()) << "no records yet: the verdict waits for them";
  ASSERT_TRUE(watch.stalled());
  EXPECT_EQ(watch.stall().rfind("rank 0 has waited ", 0), 0u) << watch.stall();
  EXPECT_NE(watch.stall().find(" s in collective #6 (all_reduce, gradient bucket 0, step 6)"),
            std::string::npos)
      << watch.stall();
  ASSERT_TRUE(std::filesystem::exists(flight_request_path(launch))) << "the ranks were not asked";
  write_json(flights + "/flight_rank0.json", r0.to_json(0, 2, "asked"));
  write_json(flights + "/flight_rank1.json", r1.to_json(1, 2, "asked"));
  const auto verdict = watch.poll();
  ASSERT_TRUE(verdict.has_value());
  EXPECT_NE(verdict->find("rank 1 is behind: rank 0 waits in collective #6"), std::string::npos) << *verdict;
  EXPECT_FALSE(watch.poll()) << "one verdict per attempt";
  watch.reset();
  EXPECT_FALSE(std::filesystem::exists(flight_request_path(launch)))
      << "a restarted group would be asked at once";
}

// Note [An earlier start's flight records]: set_flight_dir, on every rank of a world of 2, moves
// an earlier start's records (a world-4 hang's, and a file that is not a record stays) into
// .flight.previous, in place of an older hang's there (not a mix: the older one's world of 8
// would size the verdict), before its watchdog runs; the folder then holds none, and a
// second start with nothing to move keeps them. Before, each start removed them.
TEST(FlightRecords, AStartSetsTheLastHangsRecordsAsideInPlaceOfOlderOnes) {
  const std::string dir = scratch_dir("flight_set_aside");
  const std::string previous = previous_flight_dir(dir);
  std::filesystem::create_directories(previous);
  write_json(previous + "/flight_rank7.json", record(7, 8, 2));  // an older hang's
  write_json(dir + "/flight_rank0.json", record(0, 4, 3, "all_reduce", "gradient bucket 0"));
  for (int r = 1; r < 4; ++r) write_json(dir + "/flight_rank" + std::to_string(r) + ".json", record(r, 4, 2));
  write_json(dir + "/flight_rank_notes.json", {{"mine", 1}});
  for (int start = 0; start < 2; ++start)
    testing_dist::run_world(
        2, [&](const DistContext& ctx) { const_cast<DistContext&>(ctx).set_flight_dir(dir); });
  EXPECT_TRUE(flight_record_ranks(dir).empty());
  EXPECT_TRUE(std::filesystem::exists(dir + "/flight_rank_notes.json"));
  // Another node's local rank 0 on a shared folder found the same: what is gone is done.
  EXPECT_NO_THROW(set_aside_flight_record(dir, 2));
  EXPECT_NO_THROW(clear_previous_flight_records(dir + "/no_such_folder"));
  EXPECT_EQ(flight_record_ranks(previous), (std::vector<int>{0, 1, 2, 3}));
  int world = 0;
  const auto records = read_flight_records(previous, world);
  EXPECT_EQ(world, 4);
  EXPECT_NE(hang_verdict(records, world).find("rank 1 is behind: rank 0 waits"), std::string::npos)
      << hang_verdict(records, world);
}

// A file in the folder that is not a record as ranks write them (hand edited, another tool's)
// is skipped: the verdict neither fails on it (a missing "entries" was an uncaught JSON error,
// exit 1 without the file's name) nor is sized by it (a world of 2e9 made 2e9 lines).
TEST(FlightVerdict, AFileThatIsNotARecordIsSkipped) {
  const std::string dir = scratch_dir("flight_foreign");
  write_json(dir + "/flight_rank0.json", record(0, 2, 3, "all_reduce", "gradient bucket 0"));
  write_json(dir + "/flight_rank1.json", {{"world", 2}, {"rank", 1}});
  write_json(dir + "/flight_rank2.json",
             {{"world", 2000000000}, {"rank", 2}, {"entries", nlohmann::json::array()}});
  nlohmann::json bad_entry = record(1, 2, 3);
  bad_entry["entries"][0].erase("state");
  write_json(dir + "/flight_rank3.json", bad_entry);
  int world = 0;
  const auto records = read_flight_records(dir, world);
  EXPECT_EQ(records.size(), 1u);
  EXPECT_EQ(world, 2);
  EXPECT_NE(hang_verdict(records, world).find("rank 1 left no record"), std::string::npos);
}
