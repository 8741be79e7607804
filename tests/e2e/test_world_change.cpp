// A checkpoint resumes at another world size (#16 item 1, Note [Resume at another world size]):
// killed mid-epoch at world 2 and resumed at world 3 (and 4 -> 2), the interrupted epoch's
// samples are each trained once across both runs (the resumed part padded as PyTorch pads, by
// fewer than the new world size), the later epochs are PyTorch's sampler at the new size (a
// fresh run's at that size), and the run record says what happened. Read from the sample
// traces (--trace_samples_dir), the checkpoint's meta.json and the metrics file.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "e2e_helpers.h"
#include "proc.h"

using namespace ddptrain::e2e;

namespace {

// epoch -> rank -> the indices that rank trained in that epoch, in order (micro-batches
// [from, to) of each epoch when given).
using Trace = std::map<int, std::map<int, std::vector<int64_t>>>;

Trace read_trace(const std::string& dir, int world, int64_t micro_to = -1, int epoch_cut = -1) {
  Trace t;
  for (int r = 0; r < world; ++r)
    for (const TracedRun& run : read_sample_trace(dir + "/rank" + std::to_string(r) + ".txt"))
      for (const auto& [epoch, micros] : run.epochs)
        for (const auto& [micro, ids] : micros) {
          if (epoch == epoch_cut && micro >= micro_to) continue;  // trained after the checkpoint: lost
          if (epoch > epoch_cut && epoch_cut > 0) continue;
          t[epoch][r].insert(t[epoch][r].end(), ids.begin(), ids.end());
        }
  return t;
}

std::vector<int64_t> all_of(const std::map<int, std::vector<int64_t>>& by_rank) {
  std::vector<int64_t> out;
  for (const auto& [r, ids] : by_rank) out.insert(out.end(), ids.begin(), ids.end());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> traced(const std::string& dir, std::vector<std::string> extra, std::string ck = "") {
  std::vector<std::string> a = {"train",
                                "--dataset_size",
                                "240",
                                "--image_size",
                                "8",
                                "--width",
                                "0.125",
                                "--batch_size",
                                "8",
                                "--num_workers",
                                "1",
                                "--epochs",
                                "3",
                                "--lr",
                                "0.05",
                                "--log_interval",
                                "5",
                                "--threads",
                                "1",
                                "--no-use_amp",
                                "--eval_every",
                                "0",
                                "--checkpoint_dir",
                                ck.empty() ? dir + "/ck" : ck,
                                "--trace_samples_dir",
                                dir + "/trace",
                                "--metrics_file",
                                dir + "/m.jsonl"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// World `from` killed after step `kill` (checkpoints every `every` steps), resumed at world `to`:
// the interrupted epoch covered once, the next epoch as a fresh run at `to`.
void resume_at_other_world(int from, int to, int every, int kill,
                           const std::vector<std::string>& flags = {}) {
  const std::string tag = std::to_string(from) + "to" + std::to_string(to) + (flags.empty() ? "" : flags[0]);
  const std::string whole = fresh_dir("world_whole" + tag), cut = fresh_dir("world_cut" + tag),
                    fresh = fresh_dir("world_fresh" + tag);
  std::vector<std::string> saving = {"--save_every_steps", std::to_string(every)};
  saving.insert(saving.end(), flags.begin(), flags.end());
  ProcResult w = run(launch(from, free_port(), traced(whole, saving)), {}, 300);
  ASSERT_EQ(w.exit_code, 0) << w.output;
  ProcResult k = run(launch(from, free_port(), traced(cut, saving)), fault_at_step("KILL", kill, 1), 300);
  ASSERT_NE(k.exit_code, 0) << k.output;
  const int64_t saved_step = kill / every * every;
  char name[32];
  std::snprintf(name, sizeof(name), "/ck/step_%08lld", static_cast<long long>(saved_step));
  const nlohmann::json meta = nlohmann::json::parse(read_text(cut + name + "/meta.json"));
  const int epoch = meta.at("epoch").get<int>();
  const int64_t micro_done = meta.at("batches_done").get<int64_t>();
  ASSERT_GT(micro_done, 0) << "the kill must land mid-epoch";

  // The resumed run writes its own trace (and metrics) next to the killed run's checkpoints.
  const std::string resumed = fresh_dir("world_resumed" + tag);
  std::vector<std::string> args = traced(resumed, saving, cut + "/ck");
  args.insert(args.end(), {"--resume_from", "auto"});
  ProcResult r = run(launch(to, free_port(), args), {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  if (std::find(flags.begin(), flags.end(), "--keep_global_batch") == flags.end()) {  // said, with both
    EXPECT_FALSE(lines_with(r.output, "; the checkpoint's run's was ").empty()) << r.output;
  }
  ProcResult f = run(launch(to, free_port(), traced(fresh, flags)), {}, 300);
  ASSERT_EQ(f.exit_code, 0) << f.output;

  // The interrupted epoch: what the killed run trained before its checkpoint, and the rest.
  const Trace planned = read_trace(whole + "/trace", from);
  const Trace before = read_trace(cut + "/trace", from, micro_done, epoch);
  const Trace after = read_trace(resumed + "/trace", to);
  std::vector<int64_t> covered = all_of(before.at(epoch));
  const std::vector<int64_t> rest = all_of(after.at(epoch));
  covered.insert(covered.end(), rest.begin(), rest.end());
  std::sort(covered.begin(), covered.end());
  const std::vector<int64_t> want = all_of(planned.at(epoch));
  std::vector<int64_t> extra, missing;
  std::set_difference(covered.begin(), covered.end(), want.begin(), want.end(), std::back_inserter(extra));
  std::set_difference(want.begin(), want.end(), covered.begin(), covered.end(), std::back_inserter(missing));
  std::printf(
      "world %d -> %d, epoch %d: %zu samples planned, %zu trained before the checkpoint, %zu after it; "
      "%zu repeated as padding, %zu missing\n",
      from, to, epoch, want.size(), all_of(before.at(epoch)).size(), rest.size(), extra.size(),
      missing.size());
  EXPECT_TRUE(missing.empty()) << "samples of epoch " << epoch << " never trained";
  EXPECT_LT(extra.size(), static_cast<size_t>(to)) << "more repeats than PyTorch's padding";
  for (int64_t i : extra)
    EXPECT_TRUE(std::binary_search(want.begin(), want.end(), i)) << "sample " << i << " not planned";

  // Later epochs: PyTorch's sampler at the new world size, rank by rank.
  const Trace fresh_trace = read_trace(fresh + "/trace", to);
  for (int e = epoch + 1; e <= 3; ++e)
    for (int rank = 0; rank < to; ++rank)
      EXPECT_EQ(after.at(e).at(rank), fresh_trace.at(e).at(rank)) << "epoch " << e << " rank " << rank;

  // The run record says what happened.
  bool said = false;
  for (const auto& rec : read_jsonl(resumed + "/m.jsonl"))
    if (rec.value("kind", "") == "run" && rec.contains("resumed_from_world")) {
      said = true;
      EXPECT_EQ(rec.at("resumed_from_world").get<int>(), from);
      EXPECT_EQ(rec.at("epoch").get<int>(), epoch) << "the epoch the run continues";
      EXPECT_EQ(rec.at("samples_left_in_epoch").get<int64_t>(),
                static_cast<int64_t>(want.size()) - static_cast<int64_t>(all_of(before.at(epoch)).size()));
    }
  EXPECT_TRUE(said) << "no run record names the world size the checkpoint was written at";
  // And the epoch's record which part of the epoch's positions this run trained.
  bool recorded = false;
  for (const auto& rec : read_jsonl(resumed + "/m.jsonl"))
    if (rec.value("kind", "") == "epoch" && rec.value("epoch", 0) == epoch) {
      recorded = true;
      EXPECT_EQ(rec.at("positions_done_before").get<int64_t>(),
                static_cast<int64_t>(all_of(before.at(epoch)).size()))
          << rec;
      EXPECT_EQ(rec.at("positions_in_epoch").get<int64_t>(), static_cast<int64_t>(want.size())) << rec;
    }
  EXPECT_TRUE(recorded) << "no record of the resumed epoch";
}

}  // namespace

// 240 samples, batch 8: world 2 has 15 micro-batches per rank per epoch; killed at step 22, the
// checkpoint of step 20 is 5 micro-batches into epoch 2.
TEST(WorldChange, KilledAtWorldTwoResumesAtWorldThree) { resume_at_other_world(2, 3, 5, 22); }

// World 4: 7 micro-batches per rank (60 samples, drop_last); killed at step 10, the checkpoint
// of step 8 is 1 micro-batch into epoch 2.
TEST(WorldChange, KilledAtWorldFourResumesAtWorldTwo) { resume_at_other_world(4, 2, 4, 10); }

// --no-drop_last (#28 item 8): world 4 trains 8 micro-batches per rank, the last of 4 samples;
// killed at step 11, the checkpoint of step 9 is 1 micro-batch into epoch 2; every one of the
// 240 samples is trained in each epoch.
TEST(WorldChange, WithoutDropLastEverySampleIsTrainedAcrossAWorldChange) {
  resume_at_other_world(4, 2, 3, 11, {"--no-drop_last"});
}

// Back at the epoch's world size after another (2 -> 1 -> 2 -> 2, each run stopped by
// --max_steps): the third run trains part of the epoch's rest at world 2 and counts its batches
// from where the rest began, so the fourth, at world 2 again, continues after them (its
// checkpoint's plan says where), not at the epoch's batch of that count. Across the four runs
// each of the epoch's 240 samples is trained exactly once.
TEST(WorldChange, BackAtTheEpochsWorldSizeTheRestIsNotTrainedTwice) {
  const std::string dir = fresh_dir("world_back");
  const std::vector<std::pair<int, int>> parts = {{2, 3}, {1, 5}, {2, 7}, {2, 100}};  // world, max_steps
  for (size_t i = 0; i < parts.size(); ++i) {
    std::vector<std::string> extra = {"--epochs", "1",           "--save_every_steps",
                                      "1",        "--max_steps", std::to_string(parts[i].second)};
    if (i > 0) extra.insert(extra.end(), {"--resume_from", "auto"});
    ProcResult r = run(launch(parts[i].first, free_port(), traced(dir, extra)), {}, 300);
    ASSERT_EQ(r.exit_code, 0) << "part " << i << ": " << r.output;
  }
  const std::vector<int64_t> trained = all_of(read_trace(dir + "/trace", 2).at(1));
  std::vector<int64_t> once(240);
  for (int64_t i = 0; i < 240; ++i) once[static_cast<size_t>(i)] = i;
  EXPECT_EQ(trained, once) << trained.size() << " samples trained in epoch 1 (240 planned, each once)";
}

// --keep_global_batch: world 2 with 2 accumulation steps (global batch 32) resumed at world 4
// keeps 32 with 1 step; at world 3 32 is not a multiple of 8 x 3: exit 2 naming the numbers.
TEST(WorldChange, KeepGlobalBatchChangesTheAccumulation) {
  const std::string cut = fresh_dir("world_keep_cut");
  const std::vector<std::string> accum = {"--save_every_steps", "3", "--grad_accum_steps", "2"};
  ProcResult k = run(launch(2, free_port(), traced(cut, accum)), fault_at_step("KILL", 4, 1), 300);
  ASSERT_NE(k.exit_code, 0) << k.output;
  std::vector<std::string> args = traced(fresh_dir("world_keep4"), accum, cut + "/ck");
  args.insert(args.end(), {"--resume_from", "auto", "--keep_global_batch"});
  ProcResult bad = run(launch(3, free_port(), args), {}, 300);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find(
                "--keep_global_batch: the checkpoint's global batch 32 is not a multiple of --batch_size 8 x "
                "world 3 = 24"),
            std::string::npos)
      << bad.output;
  const std::string metrics = args[std::find(args.begin(), args.end(), "--metrics_file") - args.begin() + 1];
  ProcResult r = run(launch(4, free_port(), args), {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int seen = 0;
  for (const auto& rec : read_jsonl(metrics))
    if (rec.value("kind", "") == "run" && rec.value("resumed_from_world", 0) == 2) {
      ++seen;
      EXPECT_EQ(rec.at("world_size").get<int>(), 4);
      EXPECT_EQ(rec.at("grad_accum_steps").get<int>(), 1) << "global batch 32 = 8 x 4 x 1";
    }
  EXPECT_EQ(seen, 1) << r.output;
}

namespace {

// The learning rate of each step record of a metrics file, by global step.
std::map<int64_t, double> lr_by_step(const std::string& metrics) {
  std::map<int64_t, double> out;
  for (const auto& rec : read_jsonl(metrics))
    if (rec.value("kind", "") == "step") out[rec.at("step").get<int64_t>()] = rec.at("lr").get<double>();
  return out;
}

nlohmann::json run_record_of(const std::string& metrics) {
  for (const auto& rec : read_jsonl(metrics))
    if (rec.value("kind", "") == "run") return rec;
  return nlohmann::json::object();
}

}  // namespace

// Note [Schedule horizon] (#28 item 5): step_cosine with --max_steps 12, killed after step 7 at
// world 2 (checkpoint of step 6). Resumed at world 3 the last step, 12, still has the minimum
// (lr x min_lr_ratio), the step lines count global steps, and the run record says the schedule's
// end moved (12 steps now cover more samples); resumed at world 2 nothing moved. A resume with
// another --max_steps says so too, and ends at its own minimum.
TEST(WorldChange, TheStepScheduleEndsAtItsLastStepAfterAnyResume) {
  const double lr = 0.05, floor = lr * 0.1;  // --min_lr_ratio's default
  const std::vector<std::string> sched = {
      "--lr_schedule",      "step_cosine", "--warmup_steps", "2", "--max_steps", "12",
      "--save_every_steps", "6",           "--log_interval", "1"};
  const std::string cut = fresh_dir("sched_cut");
  ProcResult k = run(launch(2, free_port(), traced(cut, sched)), fault_at_step("KILL", 7, 1), 300);
  ASSERT_NE(k.exit_code, 0) << k.output;
  for (int world : {3, 2}) {
    const std::string dir = fresh_dir("sched_resumed" + std::to_string(world));
    std::vector<std::string> args = traced(dir, sched);
    args.insert(args.end(), {"--resume_from", cut + "/ck/step_00000006"});
    ProcResult r = run(launch(world, free_port(), args), {}, 300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto lrs = lr_by_step(dir + "/m.jsonl");
    ASSERT_EQ(lrs.size(), 6u) << "steps 7-12 at world " << world << ": " << r.output;
    EXPECT_EQ(lrs.begin()->first, 7);
    EXPECT_NEAR(lrs.rbegin()->second, floor, 1e-12) << "the last step's lr at world " << world;
    for (auto it = lrs.begin(); std::next(it) != lrs.end(); ++it)
      EXPECT_GT(it->second, std::next(it)->second) << "the cosine decays at step " << it->first;
    EXPECT_FALSE(lines_with(r.output, "global step 12/12 |").empty()) << r.output;
    EXPECT_FALSE(lines_with(r.output, "cosine to 0.005 at step 12").empty()) << r.output;
    const nlohmann::json rec = run_record_of(dir + "/m.jsonl");
    EXPECT_EQ(rec.at("lr_schedule").at("last_step").get<int64_t>(), 12) << rec.dump();
    if (world == 2) {
      EXPECT_FALSE(rec.contains("lr_schedule_change")) << rec.dump();
      continue;
    }
    ASSERT_TRUE(rec.contains("lr_schedule_change")) << rec.dump();
    const nlohmann::json& change = rec.at("lr_schedule_change");
    EXPECT_EQ(change.at("from").at("global_batch").get<int64_t>(), 16);
    EXPECT_EQ(rec.at("lr_schedule").at("global_batch").get<int64_t>(), 24);
    // Step 7 at world 2 was 4/9 of the way down; at world 3 it has covered fewer of the schedule's steps.
    EXPECT_GT(change.at("lr_after").get<double>(), change.at("lr_before").get<double>()) << change.dump();
    EXPECT_DOUBLE_EQ(change.at("lr_after").get<double>(), lrs.begin()->second)
        << "the change names step 7's lr";
    EXPECT_FALSE(lines_with(r.output, "the learning-rate schedule's end moved").empty()) << r.output;
  }

  // A finished run of 6 steps (its last at the minimum) continued to 12: the end moves.
  const std::string shorter = fresh_dir("sched_short"), longer = fresh_dir("sched_long");
  std::vector<std::string> six = sched;
  six[5] = "6";
  ProcResult s = run(launch(2, free_port(), traced(shorter, six)), {}, 300);
  ASSERT_EQ(s.exit_code, 0) << s.output;
  EXPECT_NEAR(lr_by_step(shorter + "/m.jsonl").rbegin()->second, floor, 1e-12);
  std::vector<std::string> args = traced(longer, sched, shorter + "/ck");
  args.insert(args.end(), {"--resume_from", "auto"});
  ProcResult l = run(launch(2, free_port(), args), {}, 300);
  ASSERT_EQ(l.exit_code, 0) << l.output;
  const nlohmann::json rec = run_record_of(longer + "/m.jsonl");
  ASSERT_TRUE(rec.contains("lr_schedule_change")) << rec.dump();
  EXPECT_EQ(rec.at("lr_schedule_change").at("from").at("last_step").get<int64_t>(), 6);
  EXPECT_NEAR(rec.at("lr_schedule_change").at("lr_before").get<double>(), floor, 1e-12);
  EXPECT_GT(rec.at("lr_schedule_change").at("lr_after").get<double>(), floor);
  EXPECT_NEAR(lr_by_step(longer + "/m.jsonl").rbegin()->second, floor, 1e-12);
}

// Note [Schedule horizon]: the warmup is counted by samples. A run of one epoch of 256 samples
// (no --max_steps: the schedule's end in samples does not move) with a warmup of 6 steps of 16
// samples, killed during the warmup at world 2 (checkpoint of step 2) and resumed at world 4 (32
// samples a step): each resumed step's learning rate is the uninterrupted run's at the same
// sample (it counted the warmup in the new run's steps, 6 x 32 samples, and said nothing).
TEST(WorldChange, TheWarmupEndsAtTheSameSampleAfterAResumeAtAnotherGlobalBatch) {
  const std::vector<std::string> sched = {
      "--lr_schedule",  "step_cosine", "--warmup_steps",     "6", "--epochs", "1",
      "--log_interval", "1",           "--save_every_steps", "2"};
  const auto in = [&](const std::string& dir) {
    std::vector<std::string> a = traced(dir, sched);
    *std::next(std::find(a.begin(), a.end(), "--dataset_size")) = "256";  // 7 whole steps at world 4
    return a;
  };
  const std::string whole = fresh_dir("warmup_whole"), cut = fresh_dir("warmup_cut");
  ProcResult w = run(launch(2, free_port(), in(whole)), {}, 300);
  ASSERT_EQ(w.exit_code, 0) << w.output;
  ProcResult k = run(launch(2, free_port(), in(cut)), fault_at_step("KILL", 3, 1), 300);
  ASSERT_NE(k.exit_code, 0) << k.output;
  const std::string dir = fresh_dir("warmup_resumed");
  std::vector<std::string> args = in(dir);
  args.insert(args.end(), {"--resume_from", cut + "/ck/step_00000002"});
  ProcResult r = run(launch(4, free_port(), args), {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto uninterrupted = lr_by_step(whole + "/m.jsonl"), lrs = lr_by_step(dir + "/m.jsonl");
  const nlohmann::json rec = run_record_of(dir + "/m.jsonl");
  EXPECT_FALSE(rec.contains("lr_schedule_change")) << rec.dump();
  EXPECT_EQ(rec.at("lr_schedule").at("warmup_batch").get<int64_t>(), 16) << rec.dump();
  // Resumed step s ends at sample 32 + 32 (s - 2), the uninterrupted run's step 2s - 2 at 16 (2s - 2).
  for (int64_t s : {3, 4}) {
    ASSERT_TRUE(lrs.count(s) && uninterrupted.count(2 * s - 2)) << r.output;
    EXPECT_NEAR(lrs.at(s), uninterrupted.at(2 * s - 2), 1e-12) << "resumed step " << s;
  }
  EXPECT_NEAR(lrs.at(4), 0.05, 1e-12) << "the warmup ends at sample 96, with step 4";
  for (auto it = lrs.find(5); it != lrs.end() && std::next(it) != lrs.end(); ++it)
    EXPECT_GT(it->second, std::next(it)->second) << "the cosine decays after step " << it->first;
  EXPECT_NEAR(lrs.rbegin()->second, uninterrupted.rbegin()->second, 1e-12) << "both end at the minimum";
  // A warmup as long as the run never comes down to the minimum: said (it was not).
  std::vector<std::string> short_run = in(fresh_dir("warmup_past_the_end"));
  short_run.insert(short_run.end(), {"--max_steps", "3"});
  ProcResult p = run(launch(1, free_port(), short_run), {}, 300);
  ASSERT_EQ(p.exit_code, 0) << p.output;
  EXPECT_FALSE(lines_with(p.output, "reaches the run's last step, 3").empty()) << p.output;
}
