// End-to-end tests of training itself: the real ddptrain binary, real processes, Gloo on
// loopback, a real TCPStore rendezvous: CLI, data order, resume (what a run reports:
// test_e2e_reports.cpp; precision: test_mixed_precision.cpp).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "e2e_helpers.h"
#include "proc.h"

using namespace ddptrain::e2e;
namespace fs = std::filesystem;

TEST(E2E, BadInputsExitWith2AndSayWhy) {
  const std::string unused_ck = fresh_dir("unused_flags");
  struct Case {
    std::vector<std::string> args;
    std::map<std::string, std::string> env;
    std::string expect;
  } cases[] = {
      {{"train", "--batch_size", "0"}, {}, "--batch_size=0 must be > 0"},
      {{"train", "--lr", "-0.1"}, {}, "--lr=-0.1 must be > 0"},
      {{"train", "--width", "0"}, {}, "--width=0 must be in (0, 64]"},
      {{"train", "--unknown_flag"}, {}, "unknown option '--unknown_flag'"},
      {{"train", "--epochs", "two"}, {}, "--epochs='two' is not an integer"},
      {{"train", "--config", "/no/such.toml"}, {}, "--config='/no/such.toml' does not exist"},
      {{"train", "--dataset", "fashion-mnist", "--data_dir", "/no/such/dir"},
       {},
       "--data_dir: folder '/no/such/dir' has no"},
      {{"train", "--backend", "nccl"},
       {},
       "backend nccl (DistOptionsResolved::backend; ddptrain train --backend) needs CUDA"},
      {{"train", "--cpu_heap_keep_mb", "4096"}, {}, "--cpu_heap_keep_mb=4096 must be in -1..2047"},
      {{"train", "--model", "gpt", "--dataset", "token_shards", "--data_path", source_dir() + "/README.md",
        "--checkpoint_dir", unused_ck},
       {},
       "--data_path: '" + source_dir() + "/README.md' is not a token file: no llm.c header"},
      {{"train", "--model", "gpt", "--dataset", "token_shards", "--data_path", "/no/such_*.bin",
        "--checkpoint_dir", unused_ck},
       {},
       "--data_path: '/no/such_*.bin' matches no file"},
      {{"train", "--model", "gpt", "--dataset", "token_shards", "--checkpoint_dir", unused_ck},
       {},
       "--dataset token_shards needs --data_path GLOB"},
      {{"train", "--dataset", "webdataset", "--checkpoint_dir", unused_ck},
       {},
       "--dataset webdataset needs --data_path GLOB"},
      {{"train", "--dataset", "webdataset", "--data_path", source_dir() + "/README.md", "--checkpoint_dir",
        unused_ck},
       {},
       "--data_path: tar shard '" + source_dir() + "/README.md': not a tar archive"},
      {{"train"}, {{"RANK", "5"}, {"WORLD_SIZE", "2"}}, "RANK=5 must be < WORLD_SIZE=2"},
      {{"train"}, {{"RANK", "0"}, {"WORLD_SIZE", "x"}}, "WORLD_SIZE='x' is not an integer"},
      {{"train"}, {{"RANK", "0"}}, "RANK and WORLD_SIZE must be set together"},
      {{"train"},
       {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}},
       "MASTER_PORT is not set"},
      {{"launch", "--nproc_per_node", "0", "train"}, {}, "--nproc_per_node=0 must be >= 1"},
      {{"launch", "--nproc_per_node", "2", "train", "--batch_size", "-3"}, {}, "--batch_size=-3 must be > 0"},
      {{"launch", "--nproc_per_node", "2"}, {}, "launch needs the worker command"},
      {{"frobnicate"}, {}, "unknown command 'frobnicate'"},
      // Flags the chosen dataset or model does not use (they were ignored without a word; a
      // folder of their own, so that a run that is not refused leaves the build folder alone).
      {{"train", "--model", "gpt", "--dataset", "tokens", "--data_path", source_dir() + "/README.md",
        "--max_steps", "1", "--checkpoint_dir", unused_ck},
       {},
       "is the file of --dataset text, --dataset token_shards or --dataset webdataset; --dataset tokens is "
       "synthetic tokens"},
      {{"train", "--model", "gpt", "--dataset", "text", "--data_path", source_dir() + "/README.md",
        "--data_dir", "/tmp", "--max_steps", "1", "--checkpoint_dir", unused_ck},
       {},
       "--data_dir='/tmp': --dataset text reads no folder"},
      {{"train", "--n_layer", "2", "--max_steps", "1", "--checkpoint_dir", unused_ck},
       {},
       "--gpt_preset, --n_layer, --n_head and --n_embd size --model gpt and --model llama; --model "
       "mini_resnet"},
      {{"train", "--dataset", "fashion-mnist", "--num_classes", "5", "--max_steps", "1", "--checkpoint_dir",
        unused_ck},
       {},
       "--num_classes shapes --dataset synthetic; --dataset fashion-mnist takes its shape and classes from "
       "its "
       "data: drop it"},
      {{"train", "--dataset", "fashion-mnist", "--dataset_size", "100", "--max_steps", "1",
        "--checkpoint_dir", unused_ck},
       {},
       "--dataset_size=100 sizes the generated"},
      {{"inspect", "sampler", "--rank", "4", "--world_size", "2"}, {}, "--rank=4 must be in [0, 2)"},
      {{"inspect", "loader", "--dataset", "imagenet"},
       {},
       "--dataset='imagenet' is not one of synthetic, fashion-mnist, mnist, cifar10, tensors, tokens, text"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv = {binary()};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    ProcResult r = run(argv, c.env, 60);
    EXPECT_EQ(r.exit_code, 2) << c.expect << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos)
        << "expected: " << c.expect << "\ngot: " << r.output;
    EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
  }
}

// --help names every command and every inspect target that `inspect --help` lists.
TEST(E2E, HelpNamesEveryCommandAndInspectTarget) {
  ProcResult help = run({binary(), "--help"}, {}, 60);
  ASSERT_EQ(help.exit_code, 0) << help.output;
  for (const char* c : {"train", "launch", "export", "plot", "eval"})
    EXPECT_NE(help.output.find(std::string("  ") + c + " "), std::string::npos) << c << "\n" << help.output;
  for (const char* what : {"sampler", "model", "loader", "hang"})
    EXPECT_NE(help.output.find(std::string("ddptrain inspect ") + what), std::string::npos) << what << "\n"
                                                                                            << help.output;
}

TEST(E2E, InspectSamplerPrintsPyTorchIndices) {
  std::ifstream in(source_dir() + "/tests/golden/sampler.txt");
  int checked = 0;
  for (std::string line; std::getline(in, line);) {
    // Every rank and option of two shapes, one process each (~0.5 s to load LibTorch).
    if (line.rfind("1001 3 ", 0) != 0 || line.find(" 42 2 ") == std::string::npos) continue;
    std::istringstream h(line.substr(0, line.find(':')));
    std::string n, w, r, sh, seed, ep, dl;
    h >> n >> w >> r >> sh >> seed >> ep >> dl;
    std::vector<std::string> argv = {binary(), "inspect", "sampler", "--dataset_len", n,    "--world_size",
                                     w,        "--rank",  r,         "--seed",        seed, "--epoch",
                                     ep};
    if (sh == "0") argv.push_back("--no-shuffle");
    if (dl == "1") argv.push_back("--drop_last");
    ProcResult res = run(argv, {}, 30);
    ASSERT_EQ(res.exit_code, 0) << res.output;
    std::string expect = line.substr(line.find(':') + 1);
    if (!expect.empty() && expect[0] == ' ') expect.erase(0, 1);
    EXPECT_EQ(res.output, expect + "\n") << line.substr(0, line.find(':'));
    ++checked;
  }
  EXPECT_EQ(checked, 12);
  // Without --seed it shows what train's default seed (42) gives.
  auto indices = [&](std::vector<std::string> seed) {
    std::vector<std::string> argv = {binary(), "inspect", "sampler", "--dataset_len", "10", "--world_size",
                                     "3",      "--rank",  "1",       "--epoch",       "1"};
    argv.insert(argv.end(), seed.begin(), seed.end());
    ProcResult res = run(argv, {}, 30);
    EXPECT_EQ(res.exit_code, 0) << res.output;
    return res.output;
  };
  EXPECT_EQ(indices({}), indices({"--seed", "42"}));
  EXPECT_NE(indices({}), indices({"--seed", "0"}));
}

TEST(E2E, TwoRanksTrainAgreeAndPythonLoadsTheCheckpoint) {
  std::string ckpt = fresh_dir("two_ranks");
  ProcResult r = run(launch(2, free_port(), tiny_train(ckpt)), {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto fp = fingerprints(r.output);
  ASSERT_EQ(fp.size(), 2u) << r.output;
  EXPECT_EQ(fp[0], fp[1]) << "replicas diverged";
  EXPECT_FALSE(lines_with(r.output, "[0] ").empty());
  EXPECT_FALSE(lines_with(r.output, "epoch 2 done").empty()) << r.output;
  EXPECT_TRUE(fs::exists(ckpt + "/config.json"));
  for (const char* d : {"/epoch_0001", "/epoch_0002"})
    for (const char* f : {"/model.pt", "/optimizer.pt", "/meta.json", "/config.json"})
      EXPECT_TRUE(fs::exists(ckpt + d + f)) << d << f;
  ProcResult py = run(
      {python(), source_dir() + "/tests/python/check_state_dict.py", ckpt + "/epoch_0002/model.pt", "0.125"},
      {}, 120);
  EXPECT_EQ(py.exit_code, 0) << py.output;
  EXPECT_NE(py.output.find("OK"), std::string::npos) << py.output;
}

TEST(E2E, SameSeedSameBitsAndResumeEqualsUninterrupted) {
  const int port = free_port();
  std::string a = fresh_dir("resume_a"), b = fresh_dir("resume_b"), c = fresh_dir("resume_c");
  ProcResult full = run(launch(2, port, tiny_train(a)), {}, 300);
  ASSERT_EQ(full.exit_code, 0) << full.output;
  ProcResult again = run(launch(2, port, tiny_train(c)), {}, 300);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(fingerprints(full.output).at(0), fingerprints(again.output).at(0)) << "same seed, different bits";

  ProcResult first = run(launch(2, port, tiny_train(b, {"--epochs", "1"})), {}, 300);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ProcResult resumed = run(launch(2, port, tiny_train(b, {"--resume_from", b + "/epoch_0001"})), {}, 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_FALSE(lines_with(resumed.output, "resumed from").empty()) << resumed.output;
  EXPECT_TRUE(lines_with(resumed.output, "epoch 1 done").empty()) << "epoch 1 was trained again";
  EXPECT_EQ(fingerprints(full.output).at(0), fingerprints(resumed.output).at(0))
      << "resumed run differs from the uninterrupted one";
}

TEST(E2E, SingleProcessByDefault) {
  std::string ckpt = fresh_dir("single");
  std::vector<std::string> argv = {binary()};
  auto t =
      tiny_train(ckpt, {"--epochs", "1", "--max_steps", "6", "--log_interval", "1", "--enable_profiling"});
  argv.insert(argv.end(), t.begin(), t.end());
  ProcResult r = run(argv, {}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto step_lines = lines_with(r.output, "samples/s |");
  ASSERT_EQ(step_lines.size(), 6u) << r.output;
  EXPECT_NE(step_lines[0].find(" bwd "), std::string::npos) << "no step-time breakdown: " << step_lines[0];
  EXPECT_FALSE(lines_with(r.output, "[rank 0/1]").empty()) << r.output;
  EXPECT_FALSE(lines_with(r.output, "after 6 steps").empty()) << r.output;
  EXPECT_TRUE(fs::exists(ckpt + "/step_00000006/model.pt")) << r.output;
  // --enable_profiling: a Chrome trace of steps 3-5 (wait 1, warm-up 1, active 3).
  const std::string trace_path = ckpt + "/trace_rank0.json";
  ASSERT_TRUE(fs::exists(trace_path)) << r.output;
  auto trace = nlohmann::json::parse(read_text(trace_path));
  std::map<std::string, int> phases;
  std::set<int64_t> steps;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    ++phases[e.at("name").get<std::string>()];
    steps.insert(e.at("args").at("step").get<int64_t>());
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
    EXPECT_GT(e.at("ts").get<double>(), 1.7e15)
        << "not microseconds since the Unix epoch (one base for all ranks)";
  }
  // The window closes in its last step's callbacks, inside that step's end: two whole ends.
  EXPECT_EQ(phases,
            (std::map<std::string, int>{{"bwd", 3}, {"data", 3}, {"end", 2}, {"fwd", 3}, {"opt", 3}}));
  EXPECT_EQ(steps, (std::set<int64_t>{2, 3, 4}));
  // And LibTorch's own trace of the same steps (obs/kernel_trace.h): the ATen ops, which
  // scripts/profile_table.py sums by kind of work. A LibTorch without Kineto says so instead.
  const std::string kernels = ckpt + "/kernels_rank0.json";
  if (!fs::exists(kernels)) {
    EXPECT_FALSE(lines_with(r.output, "no kernel trace: LibTorch's profiler").empty()) << r.output;
    return;
  }
  ProcResult table = run({python(), source_dir() + "/scripts/profile_table.py", kernels, "--steps", "3",
                          "--out", ckpt + "/table.json"},
                         {}, 120);
  ASSERT_EQ(table.exit_code, 0) << table.output;
  const auto profile = nlohmann::json::parse(read_text(ckpt + "/table.json"));
  EXPECT_EQ(profile.at("device"), "cpu");
  const auto& cats = profile.at("categories_ms_per_step");
  ASSERT_TRUE(cats.contains("convolution")) << cats.dump();
  EXPECT_GT(cats.at("convolution").get<double>(), 0.0);
  EXPECT_GT(profile.at("total_ms_per_step").get<double>(), 0.0);
  EXPECT_LE(profile.at("total_ms_per_step").get<double>(),
            profile.at("span_ms_per_step").get<double>() * 1.01)
      << "self times add up to more than the traced span: ops counted twice";
  EXPECT_FALSE(profile.at("top").empty());
}

TEST(E2E, SyncBatchNormAndAccumulationKeepReplicasBitwiseEqual) {
  std::string ckpt = fresh_dir("syncbn");
  ProcResult r = run(launch(2, free_port(),
                            tiny_train(ckpt, {"--epochs", "1", "--sync_bn", "--grad_accum_steps", "2",
                                              "--ddp_comm_hook", "fp16", "--gradient_as_bucket_view",
                                              "--bucket_cap_mb", "0.01", "--first_bucket_mb", "0.001"})),
                     {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto fp = fingerprints(r.output);
  ASSERT_EQ(fp.size(), 2u) << r.output;
  EXPECT_EQ(fp[0], fp[1]);
  // 8 micro-batches per rank, K = 2: 4 optimizer steps, each with several buckets.
  auto lines = lines_with(r.output, "step 4/4 |");
  ASSERT_EQ(lines.size(), 1u) << r.output;
  EXPECT_EQ(lines[0].find("| 1 all-reduce"), std::string::npos) << "expected several buckets: " << lines[0];
}

// #28 item 8: each epoch's last partial batch per rank is dropped by default (the reference's
// DataLoader(drop_last=True)), and trained with --no-drop_last: 250 samples of batch 16 are 15
// micro-batches, or 16 (the last of 10 samples).
TEST(E2E, DropLastIsAFlag) {
  for (bool drop : {true, false}) {
    const std::string ck = fresh_dir(drop ? "drop_last" : "no_drop_last");
    std::vector<std::string> a = tiny_train(ck, {"--epochs", "1", "--dataset_size", "250", "--eval_every",
                                                 "0", "--metrics_file", ck + "/m.jsonl"});
    if (!drop) a.push_back("--no-drop_last");
    a.insert(a.begin(), binary());
    ProcResult r = run(a, {}, 120);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    int64_t micro = -1;
    for (const auto& rec : read_jsonl(ck + "/m.jsonl"))
      if (rec.value("kind", "") == "epoch") micro = rec.at("micro_batches_per_epoch").get<int64_t>();
    EXPECT_EQ(micro, drop ? 15 : 16) << r.output;
    EXPECT_EQ(step_values(ck + "/m.jsonl", "loss").size() > 0, true) << r.output;
    const auto meta = nlohmann::json::parse(read_text(ck + "/epoch_0001/meta.json"));
    EXPECT_EQ(meta.at("global_step").get<int64_t>(), drop ? 15 : 16);
  }
}

// GPT on byte-level text (the GPL-3 text Debian ships in base-files), world 2, AdamW with
// warmup and cosine: the loss falls over 50 steps, validation perplexity is reported, and a
// run resumed from a mid-epoch checkpoint ends bitwise equal to the uninterrupted one
// (AdamW state and the per-step learning rate included).
TEST(E2E, GptLearnsTextAndResumesExactly) {
  const std::string text = kGplText;
  ASSERT_TRUE(fs::is_regular_file(text)) << text << " is missing (Debian's base-files package)";
  auto gpt = [&](const std::string& ckpt, std::vector<std::string> extra) {
    std::vector<std::string> a = {"--optimizer",    "adamw", "--lr",     "3e-3", "--warmup_steps", "5",
                                  "--weight_decay", "0.1",   "--epochs", "2",    "--max_steps",    "50",
                                  "--log_interval", "10"};
    a.insert(a.end(), extra.begin(), extra.end());
    return gpt_text_train(ckpt, a);
  };

  const int port = free_port();
  const std::string a = fresh_dir("gpt_a"), b = fresh_dir("gpt_b");
  ProcResult full = run(launch(2, port, gpt(a, {"--save_every_steps", "20"})), {}, 300);
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const auto losses = step_losses(full.output, "GPT debug on text, world 2, loss at the step lines");
  ASSERT_GE(losses.size(), 5u) << full.output;
  EXPECT_LT(losses.back(), losses.front() * 0.8) << full.output;
  EXPECT_FALSE(lines_with(full.output, "tokens/s").empty()) << full.output;
  EXPECT_FALSE(lines_with(full.output, "val perplexity").empty()) << full.output;
  EXPECT_FALSE(lines_with(full.output, "final validation loss").empty()) << full.output;
  // The same run, killed after its step-20 checkpoint (mid-epoch 1), then resumed.
  ProcResult first =
      run(launch(2, port, gpt(b, {"--save_every_steps", "20"})), fault_at_step("KILL", 25, 1), 300);
  ASSERT_NE(first.exit_code, 0) << first.output;
  ASSERT_TRUE(fs::is_directory(b + "/step_00000020")) << first.output;
  ProcResult resumed = run(
      launch(2, port, gpt(b, {"--save_every_steps", "20", "--resume_from", b + "/step_00000020"})), {}, 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_FALSE(lines_with(resumed.output, "resumed from " + b + "/step_00000020").empty()) << resumed.output;
  EXPECT_EQ(fingerprints(full.output).at(0), fingerprints(resumed.output).at(0)) << resumed.output;
  // ddptrain eval on the saved GPT: the validation split, once.
  // Reported as training reports it (#28 item 8): val loss and perplexity, also in --metrics_file.
  ProcResult ev = run({binary(), "eval", "--checkpoint", a + "/epoch_0001", "--threads", "1",
                       "--metrics_file", a + "/eval.jsonl"},
                      {}, 120);
  ASSERT_EQ(ev.exit_code, 0) << ev.output;
  EXPECT_FALSE(lines_with(ev.output, "validation split: 54 sequences | val loss ").empty()) << ev.output;
  const auto evals = read_jsonl(a + "/eval.jsonl");
  ASSERT_EQ(evals.size(), 1u) << ev.output;
  EXPECT_EQ(evals[0].at("kind").get<std::string>(), "eval");
  EXPECT_EQ(evals[0].at("samples").get<int64_t>(), 54);
  EXPECT_NEAR(evals[0].at("val_perplexity").get<double>(), std::exp(evals[0].at("val_loss").get<double>()),
              1e-9);
  // The epoch record's names too: test_loss (the val_loss) and the token accuracy.
  EXPECT_EQ(evals[0].at("test_loss"), evals[0].at("val_loss"));
  ASSERT_TRUE(evals[0].contains("test_acc")) << evals[0].dump();
  EXPECT_GT(evals[0].at("test_acc").get<double>(), 0.0);
  EXPECT_LT(evals[0].at("test_acc").get<double>(), 1.0);
}
