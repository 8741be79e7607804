// `ddptrain eval`: a checkpoint evaluated on its test split at any world size, with the flags
// it was trained with, a --config file given to eval over them and eval's own flags over both;
// a training run's evaluation that fails, made by the resume (Note [Evaluation owed]).
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "e2e_helpers.h"
#include "proc.h"

using namespace ddptrain::e2e;
namespace fs = std::filesystem;

TEST(Eval, CountsTheTestSetOnceForAnyWorldSize) {
  // Train 1 epoch on Fashion-MNIST (a slice: --max_steps), then evaluate the checkpoint at
  // world 1, 2 and 3: every run counts exactly the 10,000 test images and agrees; and from a
  // folder of the test files alone.
  const std::string ckpt = fresh_dir("eval");
  ProcResult t = run({binary(), "train", "--dataset", "fashion-mnist", "--width", "0.125", "--batch_size",
                      "64", "--max_steps", "20", "--lr", "0.05", "--num_workers", "1", "--eval_every", "0",
                      "--checkpoint_dir", ckpt},
                     {}, 300);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_TRUE(lines_with(t.output, "test acc").empty()) << "--eval_every 0 evaluated: " << t.output;
  std::vector<double> accs, losses;
  for (int world : {1, 2, 3}) {
    const std::string metrics = ckpt + "/eval_world" + std::to_string(world) + ".jsonl";
    std::vector<std::string> eval = {
        "eval", "--checkpoint", ckpt + "/step_00000020", "--batch_size", "256", "--metrics_file", metrics};
    ProcResult r = world == 1 ? run(
                                    [&] {
                                      auto a = eval;
                                      a.insert(a.begin(), binary());
                                      return a;
                                    }(),
                                    {}, 300)
                              : run(launch(world, free_port(), eval), {}, 300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto records = read_jsonl(metrics);  // one "eval" record, rank 0's
    ASSERT_EQ(records.size(), 1u) << "world " << world << ": " << r.output;
    EXPECT_EQ(records[0].value("kind", ""), "eval");
    EXPECT_EQ(records[0].at("samples").get<int64_t>(), 10000) << "world " << world;
    // How long the evaluation took (time_s is from the metrics file's opening, written after it).
    EXPECT_GT(records[0].at("eval_s").get<double>(), 0.05);  // 10,000 images: not the writer's microseconds
    accs.push_back(records[0].at("test_acc").get<double>());
    losses.push_back(records[0].at("test_loss").get<double>());
  }
  EXPECT_GT(accs[0], 0.1) << "not the trained model's accuracy";
  // The same sums over every world size (each sample counted once, in another order of ranks).
  EXPECT_EQ(accs[0], accs[1]);
  EXPECT_EQ(accs[0], accs[2]);
  EXPECT_NEAR(losses[0], losses[1], 1e-6);
  EXPECT_NEAR(losses[0], losses[2], 1e-6);
  // The checkpoint records its training split's shape (train/training_split.h): a folder of
  // the test files alone evaluates the same (before, eval stopped for want of the training files).
  const std::string alone = fresh_dir("eval_test_files_only");
  for (const auto& e : fs::directory_iterator("/usr/share/datasets/fashion-mnist"))
    if (e.path().filename().string().rfind("t10k-", 0) == 0)
      fs::copy(e.path(), alone + "/" + e.path().filename().string());
  ProcResult only = run({binary(), "eval", "--checkpoint", ckpt + "/step_00000020", "--batch_size", "256",
                         "--data_dir", alone, "--metrics_file", alone + "/eval.jsonl"},
                        {}, 300);
  ASSERT_EQ(only.exit_code, 0) << only.output;
  const auto records = read_jsonl(alone + "/eval.jsonl");
  ASSERT_EQ(records.size(), 1u) << only.output;
  EXPECT_EQ(records[0].at("samples").get<int64_t>(), 10000);
  EXPECT_EQ(records[0].at("test_acc").get<double>(), accs[0]);
  EXPECT_EQ(records[0].at("test_loss").get<double>(), losses[0]);
  ProcResult missing = run({binary(), "eval"}, {}, 60);
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
}

namespace {

// `ddptrain train` of GPT's debug preset on text into dir for one epoch, `extra` after.
ProcResult train_gpt(const std::string& dir, std::vector<std::string> extra) {
  extra.insert(extra.begin(), {"--epochs", "1"});
  std::vector<std::string> argv = gpt_text_train(dir, extra);
  argv.insert(argv.begin(), binary());
  return run(argv, {}, 300);
}

}  // namespace

// The checkpoint's config.json said --threads 1 and no --deterministic: a --config file given
// to eval overrides it (before, the checkpoint's flags overrode the file), flags given to eval
// override the file, and both settings take effect (the eval record says what ran).
TEST(Eval, AConfigFileOverridesTheCheckpointsFlagsAndFlagsOverrideIt) {
  const std::string dir = fresh_dir("eval_config");
  ProcResult t = train_gpt(dir, {"--max_steps", "4", "--metrics_file", dir + "/train.jsonl"});
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const std::string toml = dir + "/eval.toml";
  std::ofstream(toml) << "threads = 2\ndeterministic = true\n";
  auto eval = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> a = {binary(), "eval", "--checkpoint", dir, "--metrics_file", dir + "/" + name};
    a.insert(a.end(), extra.begin(), extra.end());
    ProcResult r = run(a, {}, 120);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const auto recs = read_jsonl(dir + "/" + name);
    EXPECT_EQ(recs.size(), 1u) << r.output;
    return recs.empty() ? nlohmann::json::object() : recs[0];
  };
  const nlohmann::json as_trained = eval("a.jsonl", {});
  EXPECT_EQ(as_trained.value("threads", -1), 1);
  EXPECT_EQ(as_trained.value("deterministic_algorithms", true), false);
  const nlohmann::json from_file = eval("b.jsonl", {"--config", toml});
  EXPECT_EQ(from_file.value("threads", -1), 2) << "the checkpoint's --threads 1 overrode --config";
  EXPECT_EQ(from_file.value("deterministic_algorithms", false), true);
  const nlohmann::json flag_over_file = eval("c.jsonl", {"--config", toml, "--threads", "1"});
  EXPECT_EQ(flag_over_file.value("threads", -1), 1);
  EXPECT_EQ(flag_over_file.value("val_loss", 0.0), as_trained.value("val_loss", 1.0))
      << "same model, same data";
  // Training's own evaluation of the same model, under the same names as eval's record.
  nlohmann::json epoch;
  for (const auto& rec : read_jsonl(dir + "/train.jsonl"))
    if (rec.value("kind", "") == "epoch") epoch = rec;
  ASSERT_TRUE(epoch.contains("val_loss")) << epoch.dump();
  EXPECT_EQ(epoch.at("val_loss").get<double>(), as_trained.value("val_loss", 1.0));
  EXPECT_EQ(epoch.at("val_perplexity").get<double>(), as_trained.value("val_perplexity", 1.0));
  EXPECT_EQ(epoch.at("test_acc").get<double>(), as_trained.value("test_acc", -1.0));  // eval's had none
}

namespace {

// zlib's CRC-32 (the manifest's), bit by bit: the e2e tests link no zlib.
uint32_t crc32_bitwise(const std::string& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (const unsigned char b : bytes) {
    crc ^= b;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return crc ^ 0xFFFFFFFFu;
}

}  // namespace

// Note [A checkpoint's own flags]: a checkpoint trained by an older version with flags a later
// check refuses (its config.json rewritten here as that version wrote it, the manifest's entry
// with it) is evaluated and exported all the same; a refused flag given to eval is still
// refused, exit 2.
TEST(Eval, AnOlderCheckpointsRefusedFlagsDoNotStopEvalOrExport) {
  const std::string dir = fresh_dir("eval_old_flags");
  ProcResult t = train_gpt(dir, {"--max_steps", "2"});
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const std::string ck = dir + "/step_00000002";
  nlohmann::json config = nlohmann::json::parse(read_text(ck + "/config.json"));
  ASSERT_EQ(config.at("optimizer"), "sgd");
  config["adam_beta1"] = 0.8;            // AdamW's, under sgd
  config["min_lr_ratio"] = 0.2;          // step_cosine's, under epoch_cosine
  config["scaler_init_scale"] = 1024.0;  // with --no-use_amp
  config["width"] = 0.5;                 // mini_resnet's, under gpt
  config["profile_steps"] = 5;           // without --enable_profiling
  const std::string text = config.dump(2) + "\n";
  std::ofstream(ck + "/config.json", std::ios::trunc) << text;
  nlohmann::json manifest = nlohmann::json::parse(read_text(ck + "/manifest.json"));
  ASSERT_TRUE(manifest.at("files").contains("config.json"));
  manifest["files"]["config.json"]["bytes"] = text.size();
  manifest["files"]["config.json"]["crc32"] = crc32_bitwise(text);
  std::ofstream(ck + "/manifest.json", std::ios::trunc) << manifest.dump(2) << "\n";
  ProcResult given = run({binary(), "eval", "--checkpoint", ck, "--adam_beta1", "0.8"}, {}, 120);
  EXPECT_EQ(given.exit_code, 2) << given.output;
  EXPECT_NE(given.output.find("adam_beta1"), std::string::npos) << given.output;
  // A flag eval does not read is refused, naming it (it was accepted and ignored).
  for (const std::vector<std::string>& flag :
       std::vector<std::vector<std::string>>{{"--lr", "0.5"},
                                             {"--tensorboard_dir=" + dir + "/tb"},
                                             {"--no-checkpoint_on_signal"},
                                             {"--amp_dtype", "bf16"}}) {
    std::vector<std::string> cmd = {binary(), "eval", "--checkpoint", ck};
    cmd.insert(cmd.end(), flag.begin(), flag.end());
    ProcResult r = run(cmd, {}, 120);
    EXPECT_EQ(r.exit_code, 2) << flag[0] << ": " << r.output;
    EXPECT_NE(r.output.find("eval does not read --"), std::string::npos) << r.output;
  }
  EXPECT_FALSE(fs::exists(dir + "/tb"));

  ProcResult e = run({binary(), "eval", "--checkpoint", ck, "--metrics_file", dir + "/eval.jsonl"}, {}, 300);
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const auto recs = read_jsonl(dir + "/eval.jsonl");
  ASSERT_EQ(recs.size(), 1u) << e.output;
  EXPECT_GT(recs[0].at("samples").get<int64_t>(), 0);
  ProcResult x = run(
      {binary(), "export", "--checkpoint", ck, "--format", "safetensors", "--out", dir + "/m.safetensors"},
      {}, 120);
  ASSERT_EQ(x.exit_code, 0) << x.output;
  EXPECT_GT(fs::file_size(dir + "/m.safetensors"), 0u);
}

// Eval builds the checkpoint's model: a model flag that builds another one, given on the command
// line or in a --config file, is exit 2 naming it (--n_head 1 and --gpt_activation keep every
// tensor's shape: it evaluated another model without a word); one that builds the same model
// passes (--n_head 2, the debug preset's, recorded as 0). --dropout is refused as training's
// flags are (evaluation has none); a training key in a --config file (the run's own) is not
// read, and said.
TEST(Eval, FlagsThatBuildAnotherModelOrOnlyTrainAreRefusedFromTheCommandLineOrAConfig) {
  const std::string dir = fresh_dir("eval_another_model");
  ProcResult t = train_gpt(dir, {"--max_steps", "2"});
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const auto eval = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {binary(), "eval", "--checkpoint", dir};
    a.insert(a.end(), extra.begin(), extra.end());
    return run(a, {}, 120);
  };
  const auto config = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    return dir + "/" + name;
  };
  struct Refused {
    std::vector<std::string> flags;
    std::string named;
  };
  for (const Refused& c :
       std::vector<Refused>{{{"--n_head", "1"}, "--n_head=1"},
                            {{"--gpt_activation", "gelu_tanh"}, "--gpt_activation=\"gelu_tanh\""},
                            {{"--config", config("model.toml", "n_head = 1\n")}, "--n_head=1"},
                            {{"--dropout", "0.5"}, "eval does not read --dropout"}}) {
    const ProcResult r = eval(c.flags);
    EXPECT_EQ(r.exit_code, 2) << c.flags[0] << ": " << r.output;
    EXPECT_NE(r.output.find(c.named), std::string::npos) << r.output;
  }
  // The same model, from the command line and from the training run's own config file, whose
  // training keys eval does not read.
  const ProcResult same = eval({"--n_head", "2", "--metrics_file", dir + "/eval.jsonl"});
  EXPECT_EQ(same.exit_code, 0) << same.output;
  // (where that run started, a folder of another host, is not read either)
  const ProcResult reused = eval({"--config",
                                  config("train.toml",
                                         "lr = 0.5\nn_head = 2\ninit_from_hf = \"/nonexistent/gpt2\"\n"
                                         "resume_from = \"/nonexistent/ck\"\n"),
                                  "--metrics_file", dir + "/eval.jsonl"});
  EXPECT_EQ(reused.exit_code, 0) << reused.output;
  const auto records = read_jsonl(dir + "/eval.jsonl");
  ASSERT_EQ(records.size(), 2u) << same.output << reused.output;
  EXPECT_EQ(records[0].at("val_loss"), records[1].at("val_loss"));
}

// #28 item 1 and Note [Evaluation owed]: an epoch's checkpoint is saved before its evaluation,
// so an evaluation that fails (here an injected error on rank 0) loses none of the epoch's
// training, and the checkpoint owes the evaluation: the resume makes it first, and writes the
// epoch's record, equal to an uninterrupted run's; one in the last epoch's evaluation leaves a
// resume nothing to train but the evaluation; a checkpoint whose evaluation was made owes none.
TEST(E2E, AnEvaluationThatFailsLosesNothing) {
  const std::string ck = fresh_dir("eval_fails"), ref = fresh_dir("eval_fails_ref");
  const auto gpt = [](const std::string& dir, const std::string& metrics, std::vector<std::string> extra) {
    extra.insert(extra.begin(), {"--epochs", "2", "--metrics_file", metrics});
    return gpt_text_train(dir, extra);
  };
  const auto epochs_of = [](const std::string& metrics) {
    std::map<int, nlohmann::json> out;
    for (const auto& rec : read_jsonl(metrics))
      if (rec.value("kind", "") == "epoch") out[rec.at("epoch").get<int>()] = rec;
    return out;
  };
  ProcResult u = run(launch(2, free_port(), gpt(ref, ref + "/m.jsonl", {})), {}, 300);
  ASSERT_EQ(u.exit_code, 0) << u.output;
  const auto want = epochs_of(ref + "/m.jsonl");
  ASSERT_EQ(want.size(), 2u) << u.output;

  ProcResult f = run(launch(2, free_port(), gpt(ck, ck + "/m1.jsonl", {})),
                     {{"DDPTRAIN_FAULT_THROW_IN_EVAL", "1"}}, 300);
  EXPECT_NE(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("injected fault (DDPTRAIN_FAULT_THROW_IN_EVAL) in epoch 1's evaluation"),
            std::string::npos)
      << f.output;
  ASSERT_TRUE(fs::exists(ck + "/epoch_0001/manifest.json")) << f.output;
  EXPECT_TRUE(epochs_of(ck + "/m1.jsonl").empty());
  EXPECT_FALSE(fs::exists(ck + "/epoch_0001/evaluation.json"));
  const auto epoch_steps =
      nlohmann::json::parse(read_text(ck + "/epoch_0001/meta.json")).at("global_step").get<int64_t>();

  // The resume evaluates epoch 1 before it trains; epoch 2's evaluation fails in turn.
  ProcResult r = run(launch(2, free_port(), gpt(ck, ck + "/m2.jsonl", {"--resume_from", "auto"})),
                     {{"DDPTRAIN_FAULT_THROW_IN_EVAL", "2"}}, 300);
  EXPECT_NE(r.exit_code, 0) << r.output;
  int64_t first_step = -1;
  bool epoch_before_steps = false;
  for (const auto& rec : read_jsonl(ck + "/m2.jsonl")) {
    if (rec.value("kind", "") == "epoch" && first_step < 0) epoch_before_steps = true;
    if (rec.value("kind", "") == "step" && first_step < 0) first_step = rec.at("step").get<int64_t>();
  }
  EXPECT_GT(first_step, epoch_steps) << "epoch 1 was trained again: " << r.output;
  EXPECT_TRUE(epoch_before_steps) << r.output;
  const auto got = epochs_of(ck + "/m2.jsonl");
  ASSERT_EQ(got.count(1), 1u) << r.output;
  EXPECT_EQ(got.count(2), 0u) << r.output;
  const nlohmann::json& e1 = got.at(1);
  EXPECT_TRUE(e1.value("evaluation_resumed", false)) << e1.dump();
  for (const char* key : {"train_loss", "val_loss", "test_loss", "micro_batches_to", "step"})
    EXPECT_EQ(e1.at(key), want.at(1).at(key)) << key << ": " << e1.dump() << " vs " << want.at(1).dump();
  EXPECT_TRUE(fs::exists(ck + "/epoch_0001/evaluation.json")) << r.output;
  ASSERT_TRUE(fs::exists(ck + "/epoch_0002/manifest.json")) << r.output;
  EXPECT_FALSE(fs::exists(ck + "/epoch_0002/evaluation.json"));

  // The last epoch's evaluation failed: nothing to train, but the evaluation is made.
  ProcResult last =
      run(launch(2, free_port(), gpt(ck, ck + "/m3.jsonl", {"--resume_from", "auto"})), {}, 300);
  ASSERT_EQ(last.exit_code, 0) << last.output;
  const auto got_last = epochs_of(ck + "/m3.jsonl");
  ASSERT_EQ(got_last.count(2), 1u) << last.output;
  EXPECT_TRUE(got_last.at(2).value("evaluation_resumed", false));
  for (const char* key : {"train_loss", "val_loss", "step"})
    EXPECT_EQ(got_last.at(2).at(key), want.at(2).at(key)) << key << ": " << got_last.at(2).dump();
  for (const auto& rec : read_jsonl(ck + "/m3.jsonl")) EXPECT_NE(rec.value("kind", ""), "step") << rec.dump();
  EXPECT_FALSE(fs::exists(ck + "/epoch_0003")) << "a checkpoint saved with nothing trained";

  // Made: a further resume owes nothing.
  ProcResult again =
      run(launch(2, free_port(), gpt(ck, ck + "/m4.jsonl", {"--resume_from", "auto"})), {}, 300);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(epochs_of(ck + "/m4.jsonl").empty()) << again.output;
}

// docs/checkpoints.md: a checkpoint whose optimizer.pt was deleted to keep its weights. eval and
// export read only model.pt, meta.json and config.json (export stopped: "optimizer.pt is
// missing"), also as the newest of a folder (skipped as invalid, it left the folder with none);
// model.pt damaged still stops both.
TEST(Eval, EvalAndExportTakeACheckpointWhoseOptimizerStateWasDeleted) {
  const std::string ckpt = fresh_dir("weights_only");
  ProcResult t =
      run({binary(), "train", "--dataset", "fashion-mnist", "--width", "0.125", "--batch_size", "64",
           "--max_steps", "2", "--num_workers", "1", "--eval_every", "0", "--checkpoint_dir", ckpt},
          {}, 300);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const std::string step = ckpt + "/step_00000002";
  ASSERT_TRUE(fs::remove(step + "/optimizer.pt"));
  ProcResult e = run({binary(), "eval", "--checkpoint", step, "--batch_size", "1000"}, {}, 300);
  EXPECT_EQ(e.exit_code, 0) << e.output;
  ProcResult x = run(
      {binary(), "export", "--checkpoint", step, "--out", ckpt + "/w.safetensors", "--format", "safetensors"},
      {}, 300);
  EXPECT_EQ(x.exit_code, 0) << x.output;
  EXPECT_TRUE(fs::exists(ckpt + "/w.safetensors"));
  ProcResult folder = run({binary(), "eval", "--checkpoint", ckpt, "--batch_size", "1000", "--metrics_file",
                           ckpt + "/eval.jsonl"},
                          {}, 300);
  ASSERT_EQ(folder.exit_code, 0) << folder.output;
  const auto records = read_jsonl(ckpt + "/eval.jsonl");
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0]["checkpoint"], step) << folder.output;
  {
    std::fstream f(step + "/model.pt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  ProcResult damaged = run({binary(), "export", "--checkpoint", step, "--out", ckpt + "/d.pt"}, {}, 300);
  EXPECT_NE(damaged.exit_code, 0) << damaged.output;
  EXPECT_NE(damaged.output.find("model.pt fails its CRC-32 check"), std::string::npos) << damaged.output;
}
