// The flight recorder's ring and the verdict it leads to (Note [Flight recorder]): records made
// by FlightRecorder itself for ranks of a job, then hang_verdict names the rank behind, the
// ranks that left no record, and ranks that disagree on a collective.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "dist/flight_recorder.h"
#include "dist/flight_verdict.h"

using namespace ddptrain;

namespace {

// A rank that completed collectives 1..done (gradient bucket 0 of steps 1..done) and, unless
// `waits` is empty, waits in collective done+1 (`waits`: op, then what).
nlohmann::json record(int rank, int world, int64_t done, const std::string& op = "",
                      const std::string& what = "", const char* phase = "backward") {
  FlightRecorder r(8);
  const at::Tensor t = at::zeros({4});
  for (int64_t s = 1; s <= done; ++s) {
    r.set_phase("backward", s);
    const int64_t seq = r.issue("all_reduce", "gradient bucket 0", {t});
    r.complete(seq, true);
  }
  r.set_phase(phase, done + 1);
  if (!op.empty()) r.issue(op.c_str(), what, {t});
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
  EXPECT_NE(v.find("rank 1 is behind: ranks 0,2 wait in collective #6 (all_reduce, gradient bucket 0, step 6); "
                   "rank 1 completed #5 and has been in data (step 6) for "),
            std::string::npos) << v;
  EXPECT_EQ(v.find("left no record"), std::string::npos) << v;
}

TEST(FlightVerdict, NamesARankThatLeftNoRecord) {
  const std::string v = hang_verdict({{0, record(0, 2, 5, "all_reduce", "gradient bucket 0")}}, 2);
  EXPECT_NE(v.find("rank 1 left no record (stopped or killed)"), std::string::npos) << v;
}

TEST(FlightVerdict, NamesRanksThatDisagreeOnACollective) {
  const std::string v = hang_verdict({{0, record(0, 2, 5, "broadcast", "buffer broadcast")},
                                      {1, record(1, 2, 5, "all_reduce", "gradient bucket 2")}},
                                     2);
  EXPECT_NE(v.find("ranks disagree at #6: rank 0 broadcast (buffer broadcast) vs rank 1 all_reduce (gradient bucket 2)"),
            std::string::npos) << v;
  const std::string calm = hang_verdict({{0, record(0, 2, 5)}, {1, record(1, 2, 5)}}, 2);
  EXPECT_NE(calm.find("no hang on record"), std::string::npos) << calm;
}
