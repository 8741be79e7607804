// The step line and the metrics record of a logging interval: per-step values from the
// interval's totals, tokens/s only for token data, optional fields only when on.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "train/step_report.h"
#include "train/step_timer.h"

using namespace ddptrain;

TEST(StepReport, LineAndRecordFromIntervalTotals) {
  StepReport r;
  r.epoch = 2;
  r.step_in_epoch = 20;
  r.steps_per_epoch = 468;
  r.global_step = 488;
  r.last_step = 936;
  r.steps = 10;
  r.seconds = 1.5;
  r.loss = 0.5;
  r.lr = 0.01;
  r.samples_per_s = 1234.4;
  r.comm.allreduces = 20;
  r.comm.bytes = 10 << 20;
  r.comm.wait_s = 0.05;
  r.phases = {0.01, 0.5, 0.9, 0.09};
  const std::string line = format_step_line(r);
  EXPECT_EQ(line.rfind("epoch 2 step 20/468 | global step 488/936 | loss 0.5000 | lr 1.000e-02 | 1,234 "
                       "samples/s | 150 ms/step | 2 all-reduce "
                       "1.00 MiB/step, comm wait 5.0 ms/step",
                       0),
            0u)
      << line;
  EXPECT_EQ(line.find("tokens/s"), std::string::npos);
  EXPECT_EQ(line.find("MFU"), std::string::npos);
  EXPECT_EQ(line.find("loss scale"), std::string::npos);
  auto rec = step_record(r);
  EXPECT_DOUBLE_EQ(rec["ms_per_step"].get<double>(), 150.0);
  EXPECT_DOUBLE_EQ(rec["allreduces_per_step"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(rec["bwd_ms"].get<double>(), 90.0);
  EXPECT_FALSE(rec.contains("peak_mem_mib")) << "not counted here: absent, not -1";
  EXPECT_FALSE(rec.contains("mfu")) << "no peak: absent, not 0";
  EXPECT_FALSE(rec.contains("tokens_per_s"));
  EXPECT_FALSE(rec.contains("loss_scale"));

  r.tokens_per_sample = 64;
  r.has_peak = true;
  r.mfu = 0.315;
  r.loss_scale = 65536;
  r.grad_norm = 1.25;
  r.mem.peak_bytes = 3 << 20;
  r.param_mib = 1.25;
  r.grad_mib = 2.5;
  r.optim_mib = 0.75;
  const std::string gpt = format_step_line(r);
  EXPECT_NE(gpt.find("| peak mem 3 MiB | state MiB: params 1.2 grads 2.5 optim 0.8 |"), std::string::npos)
      << gpt;
  EXPECT_NE(gpt.find("1,234 samples/s | 79,002 tokens/s | 150 ms/step"), std::string::npos) << gpt;
  EXPECT_NE(gpt.find(" | loss scale 65536 | grad norm 1.250 | MFU 31.5% | peak mem 3 MiB |"),
            std::string::npos)
      << gpt;
  rec = step_record(r);
  EXPECT_DOUBLE_EQ(rec["tokens_per_s"].get<double>(), 1234.4 * 64);
  EXPECT_DOUBLE_EQ(rec["loss_scale"].get<double>(), 65536.0);
  EXPECT_DOUBLE_EQ(rec["grad_norm"].get<double>(), 1.25);
  EXPECT_DOUBLE_EQ(rec["peak_mem_mib"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(rec["mfu"].get<double>(), 0.315);
  EXPECT_DOUBLE_EQ(rec["param_mib"].get<double>(), 1.25);
  EXPECT_DOUBLE_EQ(rec["grad_mib"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(rec["optim_mib"].get<double>(), 0.75);
  EXPECT_EQ(with_commas(1234567.4), "1,234,567");
  EXPECT_EQ(with_commas(999), "999");
}

// A step line is taken inside the step's end phase (its callbacks): take() counts the open
// phase up to the line, and the rest of it goes to the next line (it went whole to the next
// line; a restart at an epoch's top drops what the last epoch left).
TEST(StepTimer, TakeCountsTheOpenPhaseSoFar) {
  StepTimer t;
  t.restart();
  t.open(StepTimer::kStepEnd);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto before_first = std::chrono::steady_clock::now();  // the take's own read is later
  const auto first = t.take();
  EXPECT_GE(first[StepTimer::kStepEnd], 0.015);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(t.close().first, StepTimer::kStepEnd);  // the phase ends after the line
  const double since_first =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - before_first).count();
  const auto second = t.take();
  EXPECT_GE(second[StepTimer::kStepEnd], 0.004);
  // Only the time since the first line (clock reads around it, not the sleeps' lengths).
  EXPECT_LE(second[StepTimer::kStepEnd], since_first) << "counted twice";
  t.open(StepTimer::kData);
  t.restart();
  EXPECT_EQ(t.take()[StepTimer::kData], 0.0) << "a restart leaves no phase open";
}
