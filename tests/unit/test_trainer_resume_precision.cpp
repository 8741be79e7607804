// amp_dtype=auto across devices (Note [Precision chosen by measurement]): a run whose
// checkpoint chose fp16 (on a GPU), resumed on a CPU, trains fp32 there, and its own
// checkpoints keep fp16 beside it (meta.json precision_auto), so that the next resume takes up
// fp16 again. Before, they recorded only fp32, and the run stayed fp32 back on the GPU. Here
// the GPU's checkpoint is stood in for by a CPU checkpoint whose meta.json says fp16.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/crc32.h"
#include "train/checkpoint_policy.h"
#include "trainer_fixtures.h"

namespace ddptrain {
namespace {

using trainer_test::make_net;
using trainer_test::make_optimizer;
using trainer_test::quiet_fp32;
using trainer_test::UserData;

// Sets meta.json's precision in a checkpoint, its manifest's size and CRC to match.
void record_precision(const std::string& checkpoint, const std::string& precision) {
  const auto read = [](const std::string& path) {
    std::ifstream in(path);
    return nlohmann::json::parse(in);
  };
  nlohmann::json meta = read(checkpoint + "/meta.json"), manifest = read(checkpoint + "/manifest.json");
  meta["precision"] = precision;
  const std::string bytes = meta.dump();
  std::ofstream(checkpoint + "/meta.json") << bytes;
  manifest["files"]["meta.json"]["bytes"] = bytes.size();
  manifest["files"]["meta.json"]["crc32"] = crc32_of(bytes);
  std::ofstream(checkpoint + "/manifest.json") << manifest.dump();
}

// A run of max_steps at world 1 with amp_dtype auto, resumed from `from` ("" fresh); its precision.
Precision run_to(int64_t max_steps, const std::string& dir, const std::string& from) {
  TrainerOptions o = quiet_fp32(8, 1);
  o.precision.use_amp = true;
  o.precision.amp_dtype = AmpDtype::kAuto;
  o.checkpoint.dir = dir;
  o.checkpoint.save_every_steps = 2;
  o.checkpoint.resume_from = from;
  o.loop.max_steps = max_steps;
  DistContext ctx(EnvContract{}, {"auto", std::chrono::seconds(30)});
  Trainable model = native(make_net());
  const auto optimizer = make_optimizer(*model.module, /*adamw=*/false);
  Trainer trainer(ctx, std::move(model), *optimizer, o);
  UserData train(96, false);
  EXPECT_EQ(trainer.fit(train, nullptr).global_step, max_steps);
  return trainer.precision();
}

TEST(Trainer, AutoPrecisionResumedOnADeviceWithoutItIsKeptForTheNext) {
  const std::string dir = testing_dist::temp_dir("trainer_precision_auto");
  run_to(2, dir, "");
  record_precision(dir + "/step_00000002", "fp16");  // as a GPU run's
  const Precision on_cpu = run_to(4, dir, dir + "/step_00000002");
  EXPECT_EQ(on_cpu.name(), "fp32") << "fp16 has no CPU kernels";
  const CheckpointMeta saved = read_checkpoint_meta(dir + "/step_00000004");
  EXPECT_EQ(saved.precision, "fp32");
  ASSERT_TRUE(saved.extra.contains(kPrecisionAutoKey)) << saved.extra.dump();
  EXPECT_EQ(saved.extra[kPrecisionAutoKey], "fp16");
  // The next resume reads the kept choice (it took "fp32", a choice of its own, before).
  EXPECT_EQ(run_to(6, dir, dir + "/step_00000004").auto_choice, "fp16");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ddptrain
