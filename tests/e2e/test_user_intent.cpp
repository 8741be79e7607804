// End-to-end tests of issue #18, "a run is exactly what the user asked for": each dataset
// reads its own files, flags that do not apply are refused, a resume continues this run only
// and a finished run trains nothing, epoch records say what they cover, evaluation stops on
// SIGINT, and plots draw each run apart (help texts and the docs' flags:
// test_help_and_docs.cpp).
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "e2e_helpers.h"
#include "proc.h"

using namespace ddptrain::e2e;
namespace fs = std::filesystem;

namespace {

std::set<std::string> entries(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

int records_of_kind(const std::string& metrics, const std::string& kind) {
  int n = 0;
  for (const auto& j : read_jsonl(metrics)) n += j.value("kind", "") == kind;
  return n;
}

}  // namespace

// Item 1: --data_dir had one default, Fashion-MNIST's folder, for every dataset: --dataset
// mnist trained on Fashion-MNIST. Now only fashion-mnist has a default; the others name
// --data_dir and the files they need. Item "silently ignored": flags the model or optimizer
// does not use are refused by name. Item 9: output paths that are the wrong kind of thing.
TEST(UserIntent, EachDatasetReadsItsOwnFilesAndUnusedFlagsAndPathsAreRefused) {
  const std::string readme = source_dir() + "/README.md";  // a file that exists
  const struct {
    std::vector<std::string> args;
    std::string expect;
  } cases[] = {
      {{"train", "--dataset", "mnist", "--max_steps", "1"}, "--dataset mnist reads MNIST's IDX files"},
      {{"train", "--dataset", "cifar10", "--max_steps", "1"},
       "--dataset cifar10 reads CIFAR-10's binary version"},
      {{"train", "--dataset", "tensors", "--max_steps", "1"}, "--dataset tensors reads train.pt"},
      {{"inspect", "loader", "--dataset", "mnist"}, "from --data_dir, which has no default for it"},
      {{"train", "--dataset", "mnist", "--data_dir", "/no/such"},
       "--data_dir: folder '/no/such' has no train-images-idx3-ubyte(.gz): it is not MNIST's IDX files"},
      {{"train", "--model", "gpt", "--dataset", "tokens", "--width", "0.5"},
       "--width=0.5 applies to mini_resnet"},
      {{"train", "--model", "gpt", "--dataset", "tokens", "--sync_bn"},
       "--sync_bn applies to models with BatchNorm"},
      {{"train", "--optimizer", "adamw", "--momentum", "0.5"}, "--momentum=0.5 applies to --optimizer sgd"},
      // item 9: output paths that cannot be what the flag says name the flag (was: a raw
      // filesystem error, exit 1)
      {{"train", "--checkpoint_dir", readme}, "--checkpoint_dir='" + readme + "' is a file, not a folder"},
      {{"train", "--tensorboard_dir", readme}, "--tensorboard_dir='" + readme + "' is a file, not a folder"},
      {{"train", "--trace_samples_dir", readme},
       "--trace_samples_dir='" + readme + "' is a file, not a folder"},
      {{"train", "--metrics_file", source_dir()}, "--metrics_file='" + source_dir() + "' is a folder"},
      {{"train", "--metrics_file", readme + "/m.jsonl"}, "': '" + readme + "' is a file, not a folder"},
      // Values the run cannot use, named before it starts (were: a hang, an internal error, a
      // crash of the thread pool).
      {{"inspect", "loader", "--dataset", "synthetic", "--prefetch_factor", "0", "--batches", "3"},
       "--prefetch_factor=0 must be > 0"},
      // Flags that do not apply, refused (were: ignored without a word).
      {{"inspect", "loader", "--dataset", "synthetic", "--block_size", "512"},
       "--block_size and --vocab_size apply to token datasets; --dataset synthetic holds none"},
      {{"inspect", "model", "--model", "torchscript", "--model_path", readme, "--num_classes", "7"},
       "--num_classes does not apply to --model torchscript"},
      {{"train", "--bucket_cap_mb", "1e-30"}, "--bucket_cap_mb=1e-30 must be in ["},
      {{"train", "--first_bucket_mb", "1e300"}, "--first_bucket_mb=1e+300 must be in ["},
      {{"train", "--threads", "100000"}, "--threads=100000 must be at most 4096"},
      {{"inspect", "sampler", "--dataset_len", "10", "--world_size", "4294967297", "--rank", "0"},
       "--world_size=4294967297 must be in [1, 1048576]"},
      // Flags this run would not read (were: accepted and ignored).
      {{"train", "--adam_beta1", "0.5"}, "--adam_beta1 and --adam_beta2 apply to --optimizer adamw"},
      {{"train", "--min_lr_ratio", "0.5"},
       "--min_lr_ratio=0.5 is the per-step schedule's last learning rate"},
      {{"train", "--block_size", "64"}, "--block_size and --vocab_size size the token models"},
      {{"train", "--fused_loss", "on"}, "--fused_loss on applies to token models' (B, T, V) logits"},
      {{"train", "--lr", "1e300"}, "--lr=1e+300 must be at most 1e6"},
      {{"train", "--resume_fallback", readme},
       "--resume_fallback='" + readme + "' is read only with --resume_from auto"},
      {{"train", "--profile_steps", "5"}, "this run traces none: pass --enable_profiling, or drop them"},
      // A named checkpoint holds the weights: initial ones were ignored without a word.
      {{"train", "--resume_from", source_dir(), "--init_from", readme},
       "names a checkpoint, whose weights the run resumes: --init_from would not be read"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv = {binary()};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    ProcResult r = run(argv, {}, 60);
    EXPECT_EQ(r.exit_code, 2) << c.expect << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos)
        << "expected: " << c.expect << "\ngot: " << r.output;
  }
}

// Item 4: resuming a run that already reached --max_steps trained and saved one more step
// (each rerun or restart another). Now: nothing to train, exit 0, no new checkpoint, no steps;
// the same for a run that finished all its --epochs.
TEST(UserIntent, ResumingAFinishedRunTrainsNothingAndSavesNothing) {
  const std::string ckpt = fresh_dir("finished");
  auto train = [&](const std::string& metrics, std::vector<std::string> extra) {
    extra.insert(extra.end(), {"--metrics_file", metrics});
    std::vector<std::string> argv = tiny_train(ckpt, std::move(extra));
    argv.insert(argv.begin(), binary());
    return run(argv, {}, 300);
  };
  // A rerun must leave the checkpoint directory as it was and write no step record.
  auto expect_nothing_trained = [&](const std::string& name, std::vector<std::string> extra) {
    const auto before = entries(ckpt);
    const std::string metrics = fresh_dir("finished_metrics") + "/" + name + ".jsonl";
    ProcResult r = train(metrics, std::move(extra));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(records_of_kind(metrics, "step"), 0) << r.output;
    EXPECT_EQ(entries(ckpt), before) << r.output;
  };
  const std::string scratch = fresh_dir("finished_scratch");
  ProcResult first = train(scratch + "/first.jsonl", {"--max_steps", "3"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_TRUE(entries(ckpt).count("step_00000003")) << first.output;
  expect_nothing_trained("max_steps", {"--max_steps", "3", "--resume_from", "auto"});
  // Without --max_steps the run goes on to the end of its 2 epochs ...
  ProcResult rest = train(scratch + "/rest.jsonl", {"--resume_from", "auto"});
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  EXPECT_GT(records_of_kind(scratch + "/rest.jsonl", "step"), 0) << rest.output;
  ASSERT_TRUE(entries(ckpt).count("epoch_0002")) << rest.output;
  // ... after which it has nothing left either.
  expect_nothing_trained("epochs", {"--resume_from", "auto"});
}

namespace {

// The issue's reproduction: O="--threads 1 --width 0.125 --dataset_size 256 --batch_size 16
// --checkpoint_dir ck" (here through tiny_train, 8x8 images, fp32).
ProcResult train_in(const std::string& ckpt, std::vector<std::string> extra) {
  std::vector<std::string> argv = tiny_train(ckpt, std::move(extra));
  argv.insert(argv.begin(), binary());
  return run(argv, {}, 300);
}

std::vector<int64_t> step_records(const std::string& metrics) {
  std::vector<int64_t> steps;
  for (const auto& j : read_jsonl(metrics))
    if (j.value("kind", "") == "step") steps.push_back(j.at("step").get<int64_t>());
  return steps;
}

}  // namespace

// Item 2: --resume_from auto (and so --max_restarts) continued whichever run left the highest
// step in the directory, and a new run wrote among another run's checkpoints without a word.
TEST(UserIntent, AResumeContinuesThisRunOnly) {
  const std::string ck = fresh_dir("identity");
  ASSERT_EQ(train_in(ck, {"--max_steps", "12", "--save_every_steps", "4"}).exit_code, 0);
  const auto before = entries(ck);
  // Another run: tiny_train's --lr 0.05 and --seed 42 changed.
  auto another = [](std::vector<std::string> extra) {
    extra.insert(extra.begin(), {"--lr", "0.1", "--seed", "7"});
    return extra;
  };
  const struct {
    std::vector<std::string> extra;
    std::string expect;
  } refused[] = {
      {another({"--max_steps", "3"}), "a new run: --checkpoint_dir holds another run's checkpoints"},
      {another({"--max_steps", "5", "--resume_from", "auto"}), "--checkpoint_dir holds only another run's"},
      {another({"--max_steps", "5", "--resume_from", ck + "/step_00000008"}),
       "--resume_from: the checkpoint"},
  };
  for (const auto& c : refused) {
    ProcResult r = train_in(ck, c.extra);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos)
        << "expected: " << c.expect << "\ngot: " << r.output;
    if (c.extra[0] == "--lr") {  // every flag that differs is named, with both values
      EXPECT_NE(r.output.find("--lr 0.1 (the checkpoint's: 0.05"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find("--seed 7 (the checkpoint's: 42)"), std::string::npos) << r.output;
    }
    EXPECT_EQ(entries(ck), before) << "a refused run changed the directory: " << r.output;
  }
  // The other run in its own directory continues there; its step 3 copied beside the first
  // run's step 12 makes a directory of two runs, which auto refuses (either run's saves would
  // rotate the other's away) rather than continue one of them.
  const std::string other = fresh_dir("identity_other");
  ASSERT_EQ(train_in(other, another({"--max_steps", "3"})).exit_code, 0);
  const std::string metrics = fresh_dir("identity_metrics") + "/m.jsonl";
  ProcResult own = train_in(other, another({"--max_steps", "5", "--resume_from", "auto", "--log_interval",
                                            "1", "--metrics_file", metrics}));
  ASSERT_EQ(own.exit_code, 0) << own.output;
  EXPECT_EQ(step_records(metrics), (std::vector<int64_t>{4, 5})) << own.output;
  fs::copy(other + "/step_00000003", ck + "/step_00000003", fs::copy_options::recursive);
  const auto mixed = entries(ck);
  ProcResult r = train_in(ck, another({"--max_steps", "5", "--resume_from", "auto"}));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--checkpoint_dir holds another run's checkpoints beside this run's"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(entries(ck), mixed) << "a refused run changed the directory: " << r.output;
}

// Item 9: --init_from read only torch.save pickles: our own export format was blamed on an
// old torch.save, and a DDP model's state_dict ("module." names) was "a different model".
TEST(UserIntent, InitFromTakesSafetensorsAndADdpStateDict) {
  const std::string dir = fresh_dir("init_formats");
  const std::string py = source_dir() + "/tests/python/interop.py";
  ASSERT_EQ(run({python(), py, "save_init", dir + "/init.pt", "0.125", "7"}, {}, 120).exit_code, 0);
  ProcResult wrap = run({python(), "-c",
                         "import sys, torch\nsd = torch.load(sys.argv[1])\n"
                         "torch.save({'module.' + k: v for k, v in sd.items()}, sys.argv[2])",
                         dir + "/init.pt", dir + "/ddp.pt"},
                        {}, 120);
  ASSERT_EQ(wrap.exit_code, 0) << wrap.output;
  // One step at a negligible lr from `weights`: the parameters must still be init.pt's.
  auto starts_from = [&](const std::string& name, const std::string& weights) {
    ProcResult r =
        run({binary(),         "train",       "--dataset_size", "64",    "--image_size",  "8",
             "--width",        "0.125",       "--batch_size",   "16",    "--num_workers", "0",
             "--max_steps",    "1",           "--lr",           "1e-30", "--no-use_amp",  "--checkpoint_dir",
             dir + "/" + name, "--init_from", weights},
            {}, 120);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    ProcResult same = run({python(), py, "same_params", dir + "/init.pt",
                           dir + "/" + name + "/step_00000001/model.pt", "1e-12"},
                          {}, 120);
    EXPECT_EQ(same.exit_code, 0) << name << ": " << same.output;
  };
  starts_from("from_ddp", dir + "/ddp.pt");
  ProcResult e = run({binary(), "export", "--checkpoint", dir + "/from_ddp/step_00000001", "--format",
                      "safetensors", "--out", dir + "/w.safetensors"},
                     {}, 60);
  ASSERT_EQ(e.exit_code, 0) << e.output;
  starts_from("from_safetensors", dir + "/w.safetensors");
  // export --out naming a folder: a usage error, and no temporary file left behind.
  ProcResult to_dir =
      run({binary(), "export", "--checkpoint", dir + "/from_ddp/step_00000001", "--out", dir}, {}, 60);
  EXPECT_EQ(to_dir.exit_code, 2) << to_dir.output;
  EXPECT_NE(to_dir.output.find("--out='" + dir + "' is a folder"), std::string::npos) << to_dir.output;
  EXPECT_FALSE(fs::exists(dir + ".tmp")) << to_dir.output;
}

// Item 9: eval --checkpoint of a missing path and of a --checkpoint_dir both said "an
// interrupted save?". Now a missing path says so, and a folder of checkpoints means its newest.
TEST(UserIntent, EvalNamesAMissingCheckpointAndTakesAFolderOfThem) {
  const std::string ck = fresh_dir("eval_root");
  ProcResult missing = run({binary(), "eval", "--checkpoint", ck + "/nope"}, {}, 60);
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("--checkpoint='" + ck + "/nope' does not exist"), std::string::npos)
      << missing.output;
  ProcResult empty = run({binary(), "eval", "--checkpoint", ck}, {}, 60);
  EXPECT_EQ(empty.exit_code, 2) << empty.output;
  EXPECT_NE(empty.output.find("holds no valid checkpoint"), std::string::npos) << empty.output;
  ProcResult t =
      run({binary(), "train", "--dataset", "fashion-mnist", "--width", "0.125", "--batch_size", "64",
           "--max_steps", "2", "--num_workers", "1", "--eval_every", "0", "--checkpoint_dir", ck},
          {}, 300);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  ProcResult root = run({binary(), "eval", "--checkpoint", ck, "--batch_size", "1000"}, {}, 300);
  EXPECT_EQ(root.exit_code, 0) << root.output;
  EXPECT_NE(root.output.find("using the newest that verifies, " + ck + "/step_00000002"), std::string::npos)
      << root.output;
}

// Item 10: a second run appended to the same metrics file was drawn as one zig-zag line
// with the first; MFU was drawn as a fraction while the log shows percent.
TEST(UserIntent, PlotDrawsEachRunOfAFileAsItsOwnLine) {
  const std::string dir = fresh_dir("plot_runs");
  const std::string metrics = dir + "/m.jsonl";
  for (const char* name : {"a", "b"})
    ASSERT_EQ(
        train_in(dir + "/" + name, {"--max_steps", "4", "--log_interval", "1", "--metrics_file", metrics})
            .exit_code,
        0);
  std::set<std::string> runs;
  for (const auto& j : read_jsonl(metrics)) runs.insert(j.value("run", ""));
  EXPECT_EQ(runs.size(), 2u) << "every record names its run, and the two runs differ";
  EXPECT_EQ(runs.count(""), 0u);
  // `ddptrain eval --metrics_file` writes a run of one "eval" record (here before the two):
  // nothing to draw, so not a run of the plot (it took the first colour and "run 1", and the
  // two trained runs were drawn as runs 2 and 3).
  const std::string trained = read_text(metrics);
  std::ofstream(metrics) << R"({"kind": "eval", "run": "an-eval", "step": 4, "epoch": 1, "test_loss": 0.5})"
                         << "\n"
                         << trained;
  ProcResult p = run({binary(), "plot", metrics, "-o", dir + "/p.svg"}, {}, 60);
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const std::string svg = read_text(dir + "/p.svg");
  EXPECT_EQ(count_of(svg, "<polyline"), 2u * 4u) << "2 runs x (train loss, train accuracy, samples/s, MFU)";
  EXPECT_NE(svg.find(">run 1 train<"), std::string::npos) << "the eval record counted as run 1";
  EXPECT_NE(svg.find(">run 2 train<"), std::string::npos) << "no legend per run";
  EXPECT_EQ(svg.find(">run 3 "), std::string::npos) << "the eval record counted as a run";
  EXPECT_NE(svg.find(">MFU (%)<"), std::string::npos);
}

// A run resumed at step 8 trains steps 9-16 again: the first run's records past 8 are of steps
// it replaced, left out (and said), as TensorBoard leaves them out; before, both were drawn as
// live lines.
TEST(UserIntent, PlotLeavesOutTheStepsAResumedRunTrainedAgain) {
  const std::string dir = fresh_dir("plot_resumed");
  {
    std::ofstream resumed(dir + "/resumed.jsonl");
    resumed << "{\"kind\": \"run\", \"run\": \"a\", \"step\": 0}\n";
    for (int s : {4, 8, 12, 16})
      resumed << "{\"kind\": \"step\", \"run\": \"a\", \"step\": " << s << ", \"loss\": 2}\n";
    resumed << "{\"kind\": \"run\", \"run\": \"b\", \"step\": 8}\n";
    for (int s : {12, 16})
      resumed << "{\"kind\": \"step\", \"run\": \"b\", \"step\": " << s << ", \"loss\": 1}\n";
  }
  ProcResult replaced = run({binary(), "plot", dir + "/resumed.jsonl", "-o", dir + "/resumed.svg"}, {}, 60);
  EXPECT_EQ(replaced.exit_code, 0) << replaced.output;
  EXPECT_NE(replaced.output.find("left out 2 records of run 1 past step 8"), std::string::npos)
      << replaced.output;
}

// Item 6: after a resume or an early stop, "epoch N done" and the epoch record covered part
// of the epoch but claimed all of it. Now each epoch record says which micro-batches it
// covers; the parts of an interrupted epoch cover it once, without overlap.
TEST(UserIntent, EpochRecordsSayWhichPartTheyCover) {
  const std::string ck = fresh_dir("epoch_parts");
  const std::string metrics = fresh_dir("epoch_parts_metrics") + "/m.jsonl";
  ASSERT_EQ(train_in(ck, {"--max_steps", "3", "--metrics_file", metrics}).exit_code, 0);
  ASSERT_EQ(train_in(ck, {"--resume_from", "auto", "--metrics_file", metrics}).exit_code, 0);
  std::vector<nlohmann::json> epochs;
  for (const auto& j : read_jsonl(metrics))
    if (j.value("kind", "") == "epoch") epochs.push_back(j);
  ASSERT_EQ(epochs.size(), 3u) << "epoch 1 in two parts, then epoch 2";
  const int64_t per_epoch = epochs[0].at("micro_batches_per_epoch").get<int64_t>();
  EXPECT_EQ(per_epoch, 16);  // 256 samples, batch 16, one rank
  const struct {
    int epoch;
    bool partial;
    int64_t from, to;
  } want[] = {{1, true, 0, 3}, {1, true, 3, per_epoch}, {2, false, 0, per_epoch}};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(epochs[i].at("epoch").get<int>(), want[i].epoch) << epochs[i];
    EXPECT_EQ(epochs[i].at("partial").get<bool>(), want[i].partial) << epochs[i];
    EXPECT_EQ(epochs[i].at("micro_batches_from").get<int64_t>(), want[i].from) << epochs[i];
    EXPECT_EQ(epochs[i].at("micro_batches_to").get<int64_t>(), want[i].to) << epochs[i];
  }
}

// Item 5: SIGINT was ignored until evaluation ended, and during the final evaluation the run
// then exited 0. Now evaluation says it started, stops at the next batch on SIGINT, and the
// run saves its checkpoint and exits 128 + SIGINT, with no test numbers for the cut-short pass.
TEST(UserIntent, SigintStopsEvaluation) {
  const std::string ck = fresh_dir("eval_sigint");
  const std::string out = ck + "/run.log", metrics = ck + "/m.jsonl";
  // Batches of 1: the 10,000 test images take far longer than the wait below.
  pid_t pid = spawn({binary(), "train", "--dataset", "fashion-mnist", "--width", "0.125", "--batch_size", "1",
                     "--max_steps", "2", "--num_workers", "1", "--threads", "1", "--checkpoint_dir", ck,
                     "--metrics_file", metrics},
                    out);
  for (int i = 0; i < 1200 && lines_with(read_text(out), "evaluation starts: ").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_FALSE(lines_with(read_text(out), "evaluation starts: ").empty()) << read_text(out);
  ::kill(pid, SIGINT);
  const int code = wait_for(pid, 60);
  if (code == -1) ::kill(pid, SIGKILL);
  EXPECT_EQ(code, 128 + SIGINT) << read_text(out);
  EXPECT_TRUE(fs::exists(ck + "/step_00000002/manifest.json")) << read_text(out);
  EXPECT_EQ(records_of_kind(metrics, "epoch"), 1) << read_text(out);
  for (const auto& j : read_jsonl(metrics)) EXPECT_FALSE(j.contains("test_acc")) << j;
}

// Item 5, thread policy: with the local ranks' threads outnumbering the cores, OpenMP's
// spinning threads took each other's cores (evaluation 9.6 s instead of 1.2 s here). The
// launcher now gives such workers OMP_WAIT_POLICY=PASSIVE, and only such workers.
TEST(UserIntent, LaunchMakesOpenMpWaitPassivelyOnlyWhenThreadsOutnumberCores) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (cores < 2) GTEST_SKIP() << "needs 2 cores for 2 threads per rank to outnumber them";
  for (const bool oversubscribed : {true, false}) {
    const std::string ck = fresh_dir(oversubscribed ? "omp_passive" : "omp_default");
    std::vector<std::string> extra = {"--dataset_size", "2000000"};
    if (oversubscribed) extra.insert(extra.end(), {"--threads", std::to_string(cores)});
    pid_t launcher = spawn(launch(2, free_port(), tiny_train(ck, extra)), ck + "/launch.log");
    const std::vector<pid_t> workers = wait_for_children(launcher, 2);
    ASSERT_EQ(workers.size(), 2u);
    for (pid_t w : workers) {
      // /proc shows a worker's own environment once it has exec'd (RANK set), not the fork's.
      for (int i = 0; i < 200 && environ_of(w, "RANK").empty(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      ASSERT_NE(environ_of(w, "RANK"), "") << read_text(ck + "/launch.log");
      EXPECT_EQ(environ_of(w, "OMP_WAIT_POLICY"), oversubscribed ? "PASSIVE" : "")
          << read_text(ck + "/launch.log");
    }
    ::kill(launcher, SIGKILL);
    wait_for(launcher, 30);
    for (pid_t w : workers) ::kill(w, SIGKILL);
  }
}

namespace {

// The sample indices rank 0 traced (--trace_samples_dir) for `epoch`.
std::vector<int64_t> traced_samples(const std::string& dir, int epoch) {
  std::vector<int64_t> out;
  std::ifstream in(dir + "/rank0.txt");
  const std::string prefix = "epoch " + std::to_string(epoch) + " micro ";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    std::istringstream idx(line.substr(line.find(':') + 1));
    for (int64_t i; idx >> i;) out.push_back(i);
  }
  return out;
}

}  // namespace

// Item 3: a resume with another --batch_size repeated samples (the position was a count of
// micro-batches). Now it is a count of samples: where the new batches divide it, every sample
// of the epoch is trained exactly once; where they do not, exit 2 naming --batch_size.
TEST(UserIntent, AnotherBatchSizeOnResumeTrainsEachSampleOnce) {
  const std::string ck = fresh_dir("batch_change");
  const std::string before = fresh_dir("batch_change_before"), after = fresh_dir("batch_change_after");
  ASSERT_EQ(train_in(ck, {"--max_steps", "4", "--trace_samples_dir", before}).exit_code,
            0);  // 4 x 16 samples
  const auto dirs = entries(ck);
  ProcResult odd = train_in(ck, {"--batch_size", "24", "--epochs", "1", "--resume_from", "auto"});
  EXPECT_EQ(odd.exit_code, 2) << odd.output;
  EXPECT_NE(odd.output.find("--batch_size=24: the checkpoint stopped 64 samples per rank into epoch 1"),
            std::string::npos)
      << odd.output;
  EXPECT_EQ(entries(ck), dirs) << odd.output;
  ProcResult r = train_in(
      ck, {"--batch_size", "32", "--epochs", "1", "--resume_from", "auto", "--trace_samples_dir", after});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<int64_t> epoch1 = traced_samples(before, 1), rest = traced_samples(after, 1);
  EXPECT_EQ(epoch1.size(), 64u);
  EXPECT_EQ(rest.size(), 192u) << "micro-batches 2-7 of 32";
  epoch1.insert(epoch1.end(), rest.begin(), rest.end());
  std::sort(epoch1.begin(), epoch1.end());
  std::vector<int64_t> each_once(256);
  std::iota(each_once.begin(), each_once.end(), 0);
  EXPECT_EQ(epoch1, each_once) << "a sample of epoch 1 repeated or skipped";
}

// The README's quick start names its data relatively (--data_dir mydata): config.json records the
// data paths absolute, as --model_path, so eval finds them from any folder (it read 'corpus.txt'
// from where eval ran, and its error told the user to write the file).
TEST(UserIntent, EvalFindsDataNamedRelativelyFromAnyFolder) {
  const std::string dir = fresh_dir("relative_data");
  std::filesystem::copy_file(kGplText, dir + "/corpus.txt");
  std::vector<std::string> train = gpt_text_train(dir + "/ck", {"--max_steps", "1", "--eval_every", "0"});
  *std::next(std::find(train.begin(), train.end(), "--data_path")) = "corpus.txt";
  train.insert(train.begin(), binary());
  std::string cmd = "cd '" + dir + "' && exec";
  for (const std::string& a : train) cmd += " '" + a + "'";
  ProcResult t = run({"/bin/sh", "-c", cmd}, {}, 300);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const nlohmann::json config = nlohmann::json::parse(read_text(dir + "/ck/config.json"));
  EXPECT_EQ(config.at("data_path").get<std::string>(), dir + "/corpus.txt") << config.dump();
  ProcResult e =
      run({"/bin/sh", "-c", "cd / && exec '" + binary() + "' eval --checkpoint '" + dir + "/ck'"}, {}, 300);
  EXPECT_EQ(e.exit_code, 0) << e.output;
}
