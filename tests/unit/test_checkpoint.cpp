// Checkpoints: a model round-trips bitwise through model.pt, the file loads in Python with
// weights_only=True into the reference MiniResNet, and saving leaves no temporary files;
// optimizer shard files (Note [Optimizer shard files]) are read only where needed.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include <torch/optim/sgd.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/crc32.h"
#include "checkpoint/folder_lock.h"
#include "checkpoint/optimizer_shards.h"
#include "ddp/optimizer_state.h"
#include "ddp/shard_layout.h"
#include "dist_harness.h"
#include "models/mini_resnet.h"
#include "serialize/python_pickle.h"
#include "train/grad_scaler.h"
#include "util/error.h"
#include "util/torch_compat.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fstream>

using namespace ddptrain;
namespace fs = std::filesystem;

namespace {
std::string fresh_dir(const std::string& name) {
  std::string d = testing::TempDir() + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}
}  // namespace

TEST(Checkpoint, RoundTripBitwiseAndAtomicLayout) {
  std::string root = fresh_dir("ckpt_rt");
  torch::manual_seed(1);
  MiniResNet a(MiniResNetOptions{3, 10, 0.125});
  a->forward(torch::randn({4, 3, 16, 16}));  // move BN statistics off their defaults
  torch::optim::SGD opt_a(a->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  a->forward(torch::randn({4, 3, 16, 16})).sum().backward();
  opt_a.step();

  DistContext solo(EnvContract{}, {"auto", std::chrono::seconds(10)});
  at::Tensor rng_before = at::detail::getDefaultCPUGenerator().get_state();
  std::string dir = save_checkpoint(
      solo, root, "epoch_0003", *a, opt_a,
      {3, 17, true, 42, 1, 7, {{"grad_scaler", to_json(GradScalerState{1024.0, 7})}}, "bf16", {}, 0}, "{}\n");
  EXPECT_EQ(dir, root + "/epoch_0003");
  EXPECT_EQ(read_checkpoint_meta(dir).precision, "bf16");  // what a resume with --amp_dtype auto keeps
  for (const auto& e : fs::directory_iterator(root))
    EXPECT_EQ(e.path().filename().string().rfind(".tmp", 0), std::string::npos) << e.path();

  torch::manual_seed(2);
  MiniResNet b(MiniResNetOptions{3, 10, 0.125});
  torch::optim::SGD opt_b(b->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::randn({100});  // move the generator on; loading must bring it back
  CheckpointMeta meta = load_checkpoint(dir, solo, *b, opt_b);
  EXPECT_EQ(meta.epoch, 3);
  EXPECT_EQ(meta.batches_done, 17);
  EXPECT_TRUE(meta.epoch_complete);
  EXPECT_EQ(meta.global_step, 42);
  EXPECT_EQ(meta.seed, 7);
  ASSERT_TRUE(meta.extra.contains("grad_scaler")) << meta.extra.dump();
  EXPECT_EQ(grad_scaler_state_from_json(meta.extra["grad_scaler"]).scale, 1024.0);
  EXPECT_EQ(grad_scaler_state_from_json(meta.extra["grad_scaler"]).growth_tracker, 7);
  EXPECT_TRUE(at::detail::getDefaultCPUGenerator().get_state().equal(rng_before)) << "RNG state not restored";
  auto sa = state_dict(*a), sb = state_dict(*b);
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_TRUE(sa[i].second.equal(sb[i].second)) << sa[i].first;
  // Momentum buffers came back too: one more identical step keeps the models identical.
  auto x = torch::randn({4, 3, 16, 16});
  opt_a.zero_grad();
  a->forward(x).sum().backward();
  b->forward(x).sum().backward();
  opt_a.step();
  opt_b.step();
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_TRUE(sa[i].second.equal(sb[i].second)) << sa[i].first;
}

// A checkpoint from before meta.json held its batch size (2026-11-30) resumes its position at
// the --batch_size its config.json records, not at this run's (which repeats or skips samples).
TEST(Checkpoint, AnOlderMetaTakesItsBatchSizeFromConfigJson) {
  const std::string root = fresh_dir("ckpt_older_batch");
  MiniResNet a(MiniResNetOptions{3, 10, 0.125});
  torch::optim::SGD opt(a->parameters(), torch::optim::SGDOptions(0.1));
  DistContext solo(EnvContract{}, {"auto", std::chrono::seconds(10)});
  const auto saved = [&](const char* name, int meta_batch, const std::string& config) {
    return save_checkpoint(solo, root, name, *a, opt, {1, 5, false, 5, 1, 0, {}, "", {}, meta_batch}, config,
                           {0, {}});
  };
  const std::string older =
      saved("older", 0, "{\"batch_size\": 16, \"dataset\": \"synthetic\", \"model\": \"mini_resnet\"}\n");
  EXPECT_EQ(read_checkpoint_meta(older).batch_size, 16);
  EXPECT_EQ(verify_checkpoint(older).batch_size, 16);
  EXPECT_EQ(load_checkpoint(older, solo, *a, opt).batch_size, 16);
  EXPECT_EQ(read_checkpoint_meta(saved("own", 0, "{}\n")).batch_size, 0);  // a program's: this run's
  EXPECT_EQ(read_checkpoint_meta(saved("theirs", 0, "{\"batch_size\": 64}\n")).batch_size, 0);
  EXPECT_EQ(read_checkpoint_meta(saved("newer", 8,
                                       "{\"batch_size\": 16, \"dataset\": \"synthetic\", "
                                       "\"model\": \"mini_resnet\"}\n"))
                .batch_size,
            8);
}

TEST(Checkpoint, WrongModelIsClearError) {
  std::string root = fresh_dir("ckpt_wrong");
  MiniResNet a(MiniResNetOptions{3, 10, 0.125});
  torch::optim::SGD opt_a(a->parameters(), torch::optim::SGDOptions(0.1));
  DistContext solo(EnvContract{}, {"auto", std::chrono::seconds(10)});
  std::string dir = save_checkpoint(solo, root, "e1", *a, opt_a, {}, "{}\n");
  MiniResNet b(MiniResNetOptions{3, 10, 0.25});
  torch::optim::SGD opt_b(b->parameters(), torch::optim::SGDOptions(0.1));
  try {
    load_checkpoint(dir, solo, *b, opt_b);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("has shape"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, PythonLoadsWithWeightsOnly) {
  std::string root = fresh_dir("ckpt_py");
  torch::manual_seed(3);
  MiniResNet a(MiniResNetOptions{3, 10, 0.25});
  a->forward(torch::randn({2, 3, 8, 8}));
  auto sd = state_dict(*a);
  write_file_atomic(root + "/model.pt", pickle_tensors(sd));
  // Python checks: weights_only load, strict load into the reference module, and values.
  std::string script = std::string(DDPTRAIN_SOURCE_DIR) + "/tests/python/check_state_dict.py";
  std::string cmd = std::string(DDPTRAIN_PYTHON) + " " + script + " " + root + "/model.pt 0.25 " +
                    std::to_string(sd[0].second.sum().item<double>()) + " > " + root + "/py.log 2>&1";
  int rc = std::system(cmd.c_str());
  std::string log = read_file(root + "/py.log");
  EXPECT_EQ(rc, 0) << log;
  EXPECT_NE(log.find("OK"), std::string::npos) << log;
}

TEST(Checkpoint, DamageIsDetectedAndNamed) {
  std::string root = fresh_dir("ckpt_damage");
  MiniResNet a(MiniResNetOptions{3, 10, 0.125});
  torch::optim::SGD opt(a->parameters(), torch::optim::SGDOptions(0.1));
  DistContext solo(EnvContract{}, {"auto", std::chrono::seconds(10)});
  auto expect_error = [&](const std::string& dir, const std::string& what) {
    try {
      verify_checkpoint(dir);
      ADD_FAILURE() << "no error for " << what;
    } catch (const ddptrain::Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  // Truncated by one byte.
  std::string d1 = save_checkpoint(solo, root, "t", *a, opt, {}, "{}\n", {0, {}});
  fs::resize_file(d1 + "/model.pt", fs::file_size(d1 + "/model.pt") - 1);
  expect_error(d1, "model.pt has");
  // One byte flipped.
  std::string d2 = save_checkpoint(solo, root, "f", *a, opt, {}, "{}\n", {0, {}});
  {
    std::fstream f(d2 + "/optimizer.pt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(10);
    char c;
    f.seekg(10);
    f.get(c);
    f.seekp(10);
    f.put(static_cast<char>(c ^ 0x5a));
  }
  expect_error(d2, "optimizer.pt fails its CRC-32 check");
  // No manifest: an interrupted save.
  std::string d3 = save_checkpoint(solo, root, "m", *a, opt, {}, "{}\n", {0, {}});
  fs::remove(d3 + "/manifest.json");
  expect_error(d3, "manifest.json is missing");
  // The newest valid checkpoint wins; damaged ones are skipped.
  std::string good =
      save_checkpoint(solo, root, "g", *a, opt, {1, 0, false, 5, 1, 0, {}, "", {}, 0}, "{}\n", {0, {}});
  EXPECT_EQ(find_latest_checkpoint(root, solo.log()), good);
}

// A file of 4 GiB or more is covered whole by its CRC-32 (zlib takes 32-bit lengths: one call
// with the length cast covered only size mod 4 GiB bytes, so damage past that went unseen); a
// checkpoint written with that older CRC still verifies.
TEST(Checkpoint, Crc32CoversFilesOfFourGibibytesAndMore) {
  EXPECT_EQ(crc32_of("123456789"), 0xCBF43926u);  // the CRC-32 check value
  std::string big((size_t{1} << 32) + 16, '\0');  // three passes over it: ~5 s
  big.back() = 1;
  const uint32_t one = crc32_of(big);
  big.back() = 2;
  EXPECT_NE(crc32_of(big), one) << "a change in the last byte of a 4 GiB file is not seen";
  EXPECT_TRUE(crc32_matches(big, crc32_of_prefix(big, 16))) << "older ddptrain's CRC of this file";
  EXPECT_TRUE(crc32_matches("123456789", 0xCBF43926u));
  EXPECT_FALSE(crc32_matches("123456788", 0xCBF43926u));
}

TEST(Checkpoint, KeepsTheNewestAndCleansLeftovers) {
  std::string root = fresh_dir("ckpt_keep");
  MiniResNet a(MiniResNetOptions{3, 10, 0.125});
  torch::optim::SGD opt(a->parameters(), torch::optim::SGDOptions(0.1));
  DistContext solo(EnvContract{}, {"auto", std::chrono::seconds(10)});
  for (int s = 1; s <= 5; ++s)
    save_checkpoint(solo, root, "step_" + std::to_string(s), *a, opt, {1, s, false, s, 1, 0, {}, "", {}, 0},
                    "{}\n", {2, {}});
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(root)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"step_4", "step_5"}));
  fs::create_directories(root + "/.tmp-step_6");
  clean_checkpoint_leftovers(root, solo.log());
  EXPECT_FALSE(fs::exists(root + "/.tmp-step_6"));
  EXPECT_TRUE(fs::exists(root + "/step_5/manifest.json"));
  // Interrupted between the renames of a replacement: the old copy comes back.
  fs::rename(root + "/step_5", root + "/.old-step_5");
  fs::create_directories(root + "/.tmp-step_5");
  fs::create_directories(root + "/.old-step_4");  // stale: step_4 exists, so it is removed
  clean_checkpoint_leftovers(root, solo.log());
  EXPECT_TRUE(fs::exists(root + "/step_5/manifest.json"));
  EXPECT_FALSE(fs::exists(root + "/.old-step_5"));
  EXPECT_FALSE(fs::exists(root + "/.tmp-step_5"));
  EXPECT_FALSE(fs::exists(root + "/.old-step_4"));
  EXPECT_TRUE(fs::exists(root + "/step_4/manifest.json"));
}

// Rotation removes only this run's complete checkpoints: another run's (here with a file a
// user deleted, so resume's listing skips it) and an incomplete one of this run stay, and do
// not count among the newest kept.
TEST(Checkpoint, RotationKeepsWhatItCannotVouchFor) {
  std::string root = fresh_dir("ckpt_keep_others");
  MiniResNet a(MiniResNetOptions{3, 10, 0.125});
  torch::optim::SGD opt(a->parameters(), torch::optim::SGDOptions(0.1));
  DistContext solo(EnvContract{}, {"auto", std::chrono::seconds(10)});
  const auto meta = [](int64_t step, std::map<std::string, std::string> run) {
    return CheckpointMeta{1, step, false, step, 1, 0, {}, "", std::move(run), 0};
  };
  // An older version's checkpoint of this run (no identity recorded): this run's, as resume takes it.
  save_checkpoint(solo, root, "old_0", *a, opt, meta(0, {}), "{}\n", {0, {}});
  save_checkpoint(solo, root, "other_1", *a, opt, meta(1, {{"model", "another"}}), "{}\n", {0, {}});
  fs::remove(root + "/other_1/optimizer.pt");
  save_checkpoint(solo, root, "step_2", *a, opt, meta(2, {{"model", "this"}}), "{}\n", {0, {}});
  fs::resize_file(root + "/step_2/model.pt", 10);  // this run's, cut short
  for (int s = 3; s <= 6; ++s)
    save_checkpoint(solo, root, "step_" + std::to_string(s), *a, opt, meta(s, {{"model", "this"}}), "{}\n",
                    {2, {}});
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(root)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"other_1", "step_2", "step_5", "step_6"}));
}

// Parts of the user's: a second module and named tensors round-trip; a part the checkpoint
// lacks and a name that is no file name are clear errors.
TEST(Checkpoint, NamedPartsRoundTripAndAMissingPartIsNamed) {
  std::string root = fresh_dir("ckpt_parts");
  torch::manual_seed(3);
  MiniResNet a(MiniResNetOptions{3, 10, 0.125}), teacher(MiniResNetOptions{3, 10, 0.125});
  torch::optim::SGD opt(a->parameters(), torch::optim::SGDOptions(0.1));
  NamedTensors extras{{"ema_decay", torch::tensor({0.999})}, {"cursor", torch::arange(5)}};
  DistContext solo(EnvContract{}, {"auto", std::chrono::seconds(10)});
  std::vector<CheckpointPart> parts = training_parts(*a, opt);
  parts.push_back(module_part("teacher", *teacher));
  parts.push_back(tensors_part("extras", extras));
  const std::string dir = save_checkpoint(solo, root, "p", parts, {}, "{}\n");
  EXPECT_TRUE(fs::exists(dir + "/teacher.pt"));
  EXPECT_TRUE(fs::exists(dir + "/extras.pt"));

  torch::manual_seed(4);
  MiniResNet b(MiniResNetOptions{3, 10, 0.125}), teacher_b(MiniResNetOptions{3, 10, 0.125});
  torch::optim::SGD opt_b(b->parameters(), torch::optim::SGDOptions(0.1));
  NamedTensors loaded;
  std::vector<CheckpointPart> parts_b = training_parts(*b, opt_b);
  parts_b.push_back(module_part("teacher", *teacher_b));
  parts_b.push_back(tensors_part("extras", loaded));
  load_checkpoint(dir, solo, parts_b);
  ASSERT_EQ(loaded.size(), 2u);
  EXPECT_EQ(loaded[1].first, "cursor");
  EXPECT_TRUE(loaded[1].second.equal(torch::arange(5)));
  auto st = state_dict(*teacher), sb = state_dict(*teacher_b);
  for (size_t i = 0; i < st.size(); ++i) EXPECT_TRUE(st[i].second.equal(sb[i].second)) << st[i].first;

  NamedTensors none;
  parts_b.push_back(tensors_part("never_saved", none));
  try {
    load_checkpoint(dir, solo, parts_b);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("has no part 'never_saved'"), std::string::npos) << e.what();
  }
  try {
    save_checkpoint(solo, root, "q", {tensors_part("Bad-Name", none)}, {}, "{}\n");
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("'Bad-Name'"), std::string::npos) << e.what();
  }
}

// Note [Optimizer shard files]: the shards of two ranks are written by rank 0 alone; a rank
// that needs some parameters reads only the files that hold them and gets their state exactly;
// a missing file or another optimizer is a clear error.
TEST(OptimizerShards, ARankReadsOnlyTheFilesItsParametersAreIn) {
  // Three parameters (10, 6 and 4 elements; the last channels-last-like, strides permuted) in
  // one bucket, cut for world 2 into shards of 10: rank 0 holds a, rank 1 holds b and c.
  auto make_params = [] {
    return std::vector<at::Tensor>{at::zeros({2, 5}).requires_grad_(), at::zeros({6}).requires_grad_(),
                                   at::zeros({2, 2}).t().requires_grad_()};
  };
  auto momentum_of = [](size_t i, const at::Tensor& p) {
    return at::arange(p.numel()).view(p.sizes()).to(at::kFloat) + 100.0 * static_cast<double>(i);
  };
  const auto layout = shard_buckets({10, 6, 4}, {{0, 1, 2}}, 2);
  std::map<std::string, std::string> files;
  testing_dist::run_ranks(2, [&](const DistContext& ctx) {
    auto params = make_params();
    torch::optim::SGD full(params, torch::optim::SGDOptions(0.1).momentum(0.9));
    at::Tensor mine = at::zeros({1, layout[0].shard_numel});
    std::vector<std::vector<ShardFilePiece>> by_rank(2);
    for (size_t r = 0; r < 2; ++r)
      for (const ShardPiece& pc : layout[0].by_rank[r]) {
        by_rank[r].push_back({static_cast<int64_t>(pc.param), pc.param_offset, pc.shard_offset, pc.length});
        if (static_cast<int>(r) == ctx.rank())
          mine[0]
              .narrow(0, pc.shard_offset, pc.length)
              .copy_(flat_as(momentum_of(pc.param, params[pc.param]), params[pc.param])
                         .narrow(0, pc.param_offset, pc.length));
      }
    save_optimizer_shards(
        ctx, full, "optimizer", mine, by_rank, /*steps=*/{0, 0, 0},
        PartFiles{[&](const std::string& f, const std::string& b) { files[f] = b; }, {}, ""});
  });
  ASSERT_EQ(files.size(), 3u) << "two shard files and the layout, from rank 0 only";
  std::vector<std::string> read;
  const PartFiles source{{},
                         [&](const std::string& f) -> std::optional<std::string> {
                           read.push_back(f);
                           auto it = files.find(f);
                           return it == files.end() ? std::nullopt : std::optional<std::string>(it->second);
                         },
                         "ckpt"};
  auto params = make_params();
  torch::optim::SGD full(params, torch::optim::SGDOptions(0.1).momentum(0.9));
  const std::set<const void*> only_c{params[2].unsafeGetTensorImpl()};
  ASSERT_TRUE(load_optimizer_shards(full, "optimizer", source, &only_c, "ckpt"));
  EXPECT_EQ(read, (std::vector<std::string>{"optimizer.shards.json", "optimizer.shard1.pt"}));
  ASSERT_EQ(full.state().size(), 1u);
  auto momentum = [&](size_t i) {
    auto& s =
        static_cast<torch::optim::SGDParamState&>(*full.state().at(compat::optimizer_state_key(params[i])));
    return s.momentum_buffer();
  };
  EXPECT_TRUE(momentum(2).equal(momentum_of(2, params[2])));
  EXPECT_EQ(momentum(2).strides(), params[2].strides()) << "laid out like its parameter";
  read.clear();
  ASSERT_TRUE(load_optimizer_shards(full, "optimizer", source, nullptr, "ckpt"));
  EXPECT_EQ(read.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_TRUE(momentum(i).equal(momentum_of(i, params[i]))) << "parameter " << i;

  auto error_of = [](const std::function<void()>& fn) -> std::string {
    try {
      fn();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "no error";
  };
  torch::optim::AdamW other(params, torch::optim::AdamWOptions(0.1));
  const std::string kind =
      error_of([&] { load_optimizer_shards(other, "optimizer", source, nullptr, "ckpt"); });
  EXPECT_NE(kind.find("holds the state of sgd (1 tensors per parameter); this run's optimizer is adamw"),
            std::string::npos)
      << kind;
  files.erase("optimizer.shard1.pt");
  const std::string missing =
      error_of([&] { load_optimizer_shards(full, "optimizer", source, &only_c, "ckpt"); });
  EXPECT_NE(missing.find("checkpoint 'ckpt' lacks optimizer.shard1.pt"), std::string::npos) << missing;
  files.clear();
  EXPECT_FALSE(load_optimizer_shards(full, "optimizer", source, nullptr, "ckpt"))
      << "no shard files: the archive's";
}

// Note [One run per checkpoint folder]: a restart goes on past a lock another machine holds (a
// dead attempt's, kept by a network filesystem), never past one held under this kernel, whose
// holder is alive (a second job on the folder, which torchrun restarts after its refusal, joined
// the first's saves and cleaned its save in progress).
TEST(Checkpoint, ARestartGoesPastAnotherNodesLockNeverPastOneHeldHere) {
  const std::string dir = testing_dist::temp_dir("lock_restart");
  const Logger log;
  const auto error_of = [&](bool restart) {
    try {
      CheckpointFolderLock again(dir, log, restart);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CheckpointFolderLock held(dir, log, /*restart=*/false);
  EXPECT_NE(error_of(true).find("is in use by another run (this process"), std::string::npos)
      << error_of(true);
  // The lock file names a holder on another host (the lock is the open file description's: this
  // descriptor's write and close leave it held).
  const int fd = ::open((dir + "/.lock").c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(fd, 0);
  const std::string elsewhere = "123 node-that-died";
  ASSERT_EQ(::write(fd, elsewhere.data(), elsewhere.size()), static_cast<ssize_t>(elsewhere.size()));
  ::close(fd);
  EXPECT_EQ(error_of(true), "(no error)");
  EXPECT_NE(error_of(false).find("(process 123 on node-that-died holds"), std::string::npos)
      << error_of(false);
  // This host's name: under this kernel (its boot id, or none as older files) a live process
  // holds it, a restart is refused; under another boot id it is another machine of that name (a
  // pod rescheduled under its name elsewhere), a restart goes on.
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::ifstream boot_file("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(boot_file, boot);
  const auto holder_named = [&](const std::string& text) {
    const int f = ::open((dir + "/.lock").c_str(), O_WRONLY | O_TRUNC);
    ASSERT_GE(f, 0);
    ASSERT_EQ(::write(f, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    ::close(f);
  };
  for (const std::string& here : {"4242 " + std::string(host) + " " + boot, "4242 " + std::string(host)}) {
    holder_named(here);
    EXPECT_NE(error_of(true).find("is in use by another run (process 4242 holds"), std::string::npos)
        << here << ": " << error_of(true);
  }
  holder_named("4242 " + std::string(host) + " another-boot");
  EXPECT_EQ(error_of(true), "(no error)");
  EXPECT_NE(error_of(false).find("(process 4242 (another boot) holds"), std::string::npos) << error_of(false);
  std::filesystem::remove_all(dir);
}
