// Note [Strict collective device]: the backend takes tensors on one device only (as NCCL takes
// only the rank's GPU), and the device is one the training loop's tensors do not live on (a
// PrivateUse1 device backed by host memory), so every collective of training, evaluation,
// checkpoints, SyncBN and the stop vote must be staged there by DistContext or fail by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "config/train_config.h"
#include "config/train_from_config.h"
#include "dist/backend_factory.h"
#include "dist/device_checking_backend.h"
#include "dist_harness.h"
#include "test_device.h"
#include "util/error.h"

using namespace ddptrain;

namespace {

DistOptionsResolved strict() {
  DistOptionsResolved o{"gloo"};
  o.strict_device = testing_device::test_device();
  return o;
}

// `ddptrain train args` at world 2 on the strict device; checks that the ranks end equal and
// staged the same (non-zero) number of collectives, and returns rank 0's result.
TrainResult train_strict(const std::vector<std::string>& args) {
  const TrainConfig cfg = resolve_train_config(args);
  std::mutex m;
  std::vector<TrainResult> results(2);
  std::vector<int64_t> staged(2);
  testing_dist::run_ranks(
      2,
      [&](const DistContext& ctx) {
        TrainResult r = train(cfg, ctx, "{}");
        std::lock_guard<std::mutex> lock(m);
        results[static_cast<size_t>(ctx.rank())] = r;
        staged[static_cast<size_t>(ctx.rank())] = ctx.staged_collectives();
      },
      120, strict());
  EXPECT_EQ(results[0].fingerprint, results[1].fingerprint) << "the replicas diverged";
  EXPECT_EQ(staged[0], staged[1]) << "the ranks issued different collectives";
  EXPECT_GT(staged[0], 0);
  return results[0];
}

}  // namespace

// The test device holds data: copies there and back keep every value, non-contiguous too.
TEST(StrictDevice, TheTestDeviceKeepsWhatIsCopiedThere) {
  const auto x = at::arange(12, at::kDouble).reshape({3, 4}).t();
  const auto on = x.to(testing_device::test_device());
  EXPECT_EQ(on.device(), testing_device::test_device());
  EXPECT_TRUE(at::equal(on.to(at::kCPU), x));
  auto back = at::zeros({4, 3}, at::kDouble);
  back.copy_(on);
  EXPECT_TRUE(at::equal(back, x));
}

// The backend itself refuses a tensor off its device, by collective and device, and reduces
// (copying back) the ones on it.
TEST(StrictDevice, TheCheckingBackendRefusesATensorOffItsDevice) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto gloo = make_backend("gloo", store, 0, 1, "127.0.0.1", std::chrono::seconds(10), at::Device(at::kCPU));
  auto pg = c10::make_intrusive<DeviceCheckingBackend>(gloo, testing_device::test_device(),
                                                       std::chrono::seconds(10));
  std::vector<at::Tensor> cpu{at::ones({2})};
  try {
    pg->allreduce(cpu, c10d::AllreduceOptions());
    ADD_FAILURE() << "a CPU tensor reached the backend";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce got a tensor on cpu, but this backend takes tensors on "
                                         "privateuseone:0 only"),
              std::string::npos)
        << e.what();
  }
  std::vector<at::Tensor> on{at::full({2}, 3.0).to(testing_device::test_device())};
  pg->broadcast(on, c10d::BroadcastOptions())->wait();
  EXPECT_EQ(on[0].device(), testing_device::test_device());
  EXPECT_TRUE(at::equal(on[0].to(at::kCPU), at::full({2}, 3.0)));
  EXPECT_EQ(pg->checked_tensors(), 1);
}

// DistContext stages every collective, synchronous or not, to the strict device and back.
TEST(StrictDevice, DistContextStagesEveryCollectiveThere) {
  testing_dist::run_ranks(
      2,
      [](const DistContext& ctx) {
        std::vector<at::Tensor> sum{at::full({3}, static_cast<double>(ctx.rank() + 1), at::kDouble)};
        ctx.all_reduce_sum(sum, "test all_reduce");
        EXPECT_TRUE(at::equal(sum[0], at::full({3}, 3.0, at::kDouble)));
        std::vector<at::Tensor> bucket{at::full({2}, 1.0f)};
        ctx.all_reduce_sum_async(bucket)->wait();
        EXPECT_TRUE(at::equal(bucket[0], at::full({2}, 2.0f)));  // reduced and copied back at once
        std::vector<at::Tensor> b{at::full({2}, static_cast<float>(ctx.rank()))};
        ctx.broadcast(b, 1, "test broadcast");
        EXPECT_TRUE(at::equal(b[0], at::ones({2})));
        ctx.barrier("test barrier");
        EXPECT_EQ(ctx.staged_collectives(), 3);
      },
      60, strict());
}

// The whole loop: training with SyncBN and the stop vote, evaluation each epoch, checkpoints
// (with the RNG-state gather), then a resume from the last one, all through the strict device.
TEST(StrictDevice, TrainingEvaluationCheckpointsAndResumeStageEveryCollective) {
  const std::string dir = testing_dist::temp_dir("strict_loop");
  std::vector<std::string> args = {"--dataset",        "fashion-mnist",
                                   "--width",          "0.125",
                                   "--batch_size",     "16",
                                   "--num_workers",    "0",
                                   "--threads",        "1",
                                   "--no-use_amp",     "--sync_bn",
                                   "--eval_every",     "1",
                                   "--log_interval",   "2",
                                   "--checkpoint_dir", dir};
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = args;
    a.insert(a.end(), extra.begin(), extra.end());
    return train_strict(a);
  };
  const TrainResult first = run({"--max_steps", "4"});
  EXPECT_EQ(first.global_step, 4);
  EXPECT_GE(first.test_accuracy, 0.0) << "no evaluation ran";
  ASSERT_FALSE(first.last_checkpoint.empty());
  const TrainResult resumed = run({"--max_steps", "8", "--resume_from", first.last_checkpoint});
  EXPECT_EQ(resumed.global_step, 8);
  EXPECT_GE(resumed.test_accuracy, 0.0) << "no evaluation ran";
  std::filesystem::remove_all(dir);
}

// Notes [ZeRO stage 1], [ZeRO stage 2] and [ZeRO stage 3] on a device-only backend (as NCCL):
// the shards' all-gathers, the buckets' reduce-scatters, the scaler's agreement, the clipping
// norm and the gathers of a checkpoint are all staged there; a stage-2 checkpoint resumes at
// stage 1, and that one's at stage 3.
TEST(StrictDevice, ZeroStagesStageEveryCollective) {
  const std::string dir = testing_dist::temp_dir("strict_zero");
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"--dataset_size",
                                  "128",
                                  "--image_size",
                                  "8",
                                  "--width",
                                  "0.125",
                                  "--batch_size",
                                  "8",
                                  "--num_workers",
                                  "0",
                                  "--threads",
                                  "1",
                                  "--no-use_amp",
                                  "--optimizer",
                                  "adamw",
                                  "--lr",
                                  "0.003",
                                  "--grad_scaler",
                                  "on",
                                  "--clip_grad_norm",
                                  "1",
                                  "--eval_every",
                                  "0",
                                  "--log_interval",
                                  "2",
                                  "--checkpoint_dir",
                                  dir,
                                  "--save_every_steps",
                                  "3"};
    a.insert(a.end(), extra.begin(), extra.end());
    return train_strict(a);
  };
  const TrainResult first = run({"--zero_stage", "2", "--max_steps", "3"});
  EXPECT_EQ(first.global_step, 3);
  ASSERT_FALSE(first.last_checkpoint.empty());
  const TrainResult resumed =
      run({"--zero_stage", "1", "--max_steps", "6", "--resume_from", first.last_checkpoint});
  EXPECT_EQ(resumed.global_step, 6);
  // Stage 3: the units' asynchronous all-gathers (staged, so done at once) and the gathers
  // around the checkpoint's load and save.
  ASSERT_FALSE(resumed.last_checkpoint.empty());
  const TrainResult sharded =
      run({"--zero_stage", "3", "--max_steps", "9", "--resume_from", resumed.last_checkpoint});
  EXPECT_EQ(sharded.global_step, 9);
  std::filesystem::remove_all(dir);
}
