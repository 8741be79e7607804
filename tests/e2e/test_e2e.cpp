// End-to-end tests: the real ddptrain binary, real processes, Gloo on loopback, a real
// TCPStore rendezvous, torchrun from python3-torch, and Python reading our files.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "proc.h"

using namespace ddptrain::e2e;
namespace fs = std::filesystem;

namespace {

// A tiny synthetic job: 256 samples of 3x8x8, width 0.125: seconds per epoch.
std::vector<std::string> tiny_train(const std::string& ckpt, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"train", "--dataset_size", "256", "--image_size", "8", "--width", "0.125",
                                "--batch_size", "16", "--num_workers", "1", "--epochs", "2", "--lr", "0.05",
                                "--log_interval", "4", "--checkpoint_dir", ckpt, "--threads", "1"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::vector<std::string> launch(int nproc, int port, const std::vector<std::string>& worker) {
  std::vector<std::string> a = {binary(), "launch", "--nproc_per_node", std::to_string(nproc),
                                "--master_port", std::to_string(port)};
  a.insert(a.end(), worker.begin(), worker.end());
  return a;
}

// The fingerprint each rank logs at the end, by launcher prefix ("[r] ...").
std::map<int, std::string> fingerprints(const std::string& out) {
  std::map<int, std::string> fp;
  for (const auto& l : lines_with(out, "parameter fingerprint: ")) {
    int rank = l[0] == '[' ? std::stoi(l.substr(1)) : 0;
    fp[rank] = l.substr(l.rfind(' ') + 1);
  }
  return fp;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST(E2E, BadInputsExitWith2AndSayWhy) {
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
      {{"train", "--dataset", "fashion-mnist", "--data_dir", "/no/such/dir"}, {}, "--data_dir='/no/such/dir' has no"},
      {{"train", "--backend", "nccl"}, {}, "--backend=nccl needs CUDA"},
      {{"train"}, {{"RANK", "5"}, {"WORLD_SIZE", "2"}}, "RANK=5 must be < WORLD_SIZE=2"},
      {{"train"}, {{"RANK", "0"}, {"WORLD_SIZE", "x"}}, "WORLD_SIZE='x' is not an integer"},
      {{"train"}, {{"RANK", "0"}}, "RANK and WORLD_SIZE must be set together"},
      {{"train"}, {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}}, "MASTER_PORT is not set"},
      {{"launch", "--nproc_per_node", "0", "train"}, {}, "--nproc_per_node=0 must be >= 1"},
      {{"launch", "--nproc_per_node", "2", "train", "--batch_size", "-3"}, {}, "--batch_size=-3 must be > 0"},
      {{"launch", "--nproc_per_node", "2"}, {}, "launch needs the worker command"},
      {{"frobnicate"}, {}, "unknown command 'frobnicate'"},
      {{"inspect", "sampler", "--rank", "4", "--world_size", "2"}, {}, "--rank=4 must be in [0, 2)"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv = {binary()};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    ProcResult r = run(argv, c.env, 60);
    EXPECT_EQ(r.exit_code, 2) << c.expect << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << "expected: " << c.expect << "\ngot: " << r.output;
    EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
  }
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
    std::vector<std::string> argv = {binary(), "inspect", "sampler", "--dataset_len", n, "--world_size", w,
                                     "--rank", r, "--seed", seed, "--epoch", ep};
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
  ProcResult py = run({python(), source_dir() + "/tests/python/check_state_dict.py",
                       ckpt + "/epoch_0002/model.pt", "0.125"}, {}, 120);
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
  EXPECT_EQ(fingerprints(full.output)[0], fingerprints(again.output)[0]) << "same seed, different bits";

  ProcResult first = run(launch(2, port, tiny_train(b, {"--epochs", "1"})), {}, 300);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ProcResult resumed = run(launch(2, port, tiny_train(b, {"--resume_from", b + "/epoch_0001"})), {}, 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_FALSE(lines_with(resumed.output, "resumed from").empty()) << resumed.output;
  EXPECT_TRUE(lines_with(resumed.output, "epoch 1 done").empty()) << "epoch 1 was trained again";
  EXPECT_EQ(fingerprints(full.output)[0], fingerprints(resumed.output)[0])
      << "resumed run differs from the uninterrupted one";
}

TEST(E2E, KilledMidEpochThenResumedAutoEqualsUninterrupted) {
  // 512 samples, world 2, batch 16: 16 steps per epoch; checkpoints every 5 steps.
  const int port = free_port();
  std::vector<std::string> extra = {"--dataset_size", "512", "--save_every_steps", "5", "--keep_checkpoints", "2"};
  std::string a = fresh_dir("midepoch_a"), b = fresh_dir("midepoch_b");
  const std::string trace_a = fresh_dir("midepoch_trace_a"), trace_r = fresh_dir("midepoch_trace_r");
  auto traced = [](std::vector<std::string> args, const std::string& dir) {
    args.insert(args.end(), {"--trace_samples_dir", dir});
    return args;
  };
  ProcResult full = run(launch(2, port, traced(tiny_train(a, extra), trace_a)), {}, 300);
  ASSERT_EQ(full.exit_code, 0) << full.output;

  // Rank 1 SIGKILLs itself after step 12 (mid-epoch 1 of 2); the last checkpoint is step 10.
  ProcResult killed = run(launch(2, port, tiny_train(b, extra)),
                          {{"DDPTRAIN_FAULT_KILL_AT_STEP", "12"}, {"DDPTRAIN_FAULT_RANK", "1"}}, 300);
  EXPECT_NE(killed.exit_code, 0) << killed.output;
  EXPECT_NE(killed.output.find("FAILED: rank 1 (pid"), std::string::npos) << killed.output;
  EXPECT_NE(killed.output.find("killed by signal 9"), std::string::npos) << killed.output;
  auto args = traced(tiny_train(b, extra), trace_r);
  args.insert(args.end(), {"--resume_from", "auto"});
  ProcResult resumed = run(launch(2, port, args), {}, 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  // The samples seen after the resume, micro-batch by micro-batch on every rank, are the
  // uninterrupted run's from step 10 on.
  for (int r = 0; r < 2; ++r) {
    auto lines = [](const std::string& text) {
      std::vector<std::string> v;
      std::istringstream in(text);
      for (std::string l; std::getline(in, l);) v.push_back(l);
      return v;
    };
    const auto all = lines(read_text(trace_a + "/rank" + std::to_string(r) + ".txt"));
    const auto after = lines(read_text(trace_r + "/rank" + std::to_string(r) + ".txt"));
    ASSERT_EQ(all.size(), 32u);  // 2 epochs x 16 micro-batches
    ASSERT_EQ(after.size(), 32u - 10u) << "rank " << r;
    EXPECT_EQ(after.front().rfind("epoch 1 micro 10:", 0), 0u) << after.front();
    EXPECT_TRUE(std::equal(after.begin(), after.end(), all.begin() + 10)) << "rank " << r << " saw other samples";
  }
  EXPECT_FALSE(lines_with(resumed.output, "resuming from " + b + "/step_00000010").empty()) << resumed.output;
  EXPECT_FALSE(lines_with(resumed.output, "continuing at epoch 1 micro-batch 10").empty()) << resumed.output;
  EXPECT_EQ(fingerprints(full.output)[0], fingerprints(resumed.output)[0])
      << "a run resumed mid-epoch differs from the uninterrupted one";
  EXPECT_EQ(fingerprints(resumed.output)[0], fingerprints(resumed.output)[1]);
  // Optimizer state (momentum buffers) too, and the saved model byte for byte.
  auto opt_fp = [](const std::string& out) {
    auto l = lines_with(out, "optimizer state fingerprint: ");
    return l.empty() ? std::string("none") : l.front().substr(l.front().rfind(' ') + 1);
  };
  EXPECT_EQ(opt_fp(full.output), opt_fp(resumed.output));
  EXPECT_NE(opt_fp(full.output), "none") << full.output;
  const std::string model_a = read_text(a + "/epoch_0002/model.pt");
  EXPECT_FALSE(model_a.empty());
  EXPECT_TRUE(model_a == read_text(b + "/epoch_0002/model.pt")) << "model.pt differs after the resume";
  // Retention: only the 2 newest complete checkpoints remain.
  int complete = 0;
  for (const auto& e : fs::directory_iterator(b)) complete += fs::exists(e.path() / "manifest.json") ? 1 : 0;
  EXPECT_EQ(complete, 2);

  // The same failure under `launch --max_restarts 1`: the launcher restarts the group, which
  // resumes by itself, and the run ends equal to the uninterrupted one.
  std::string c = fresh_dir("midepoch_c");
  auto restart_cmd = launch(2, port, tiny_train(c, extra));
  restart_cmd.insert(restart_cmd.begin() + 2, {"--max_restarts", "1"});
  ProcResult restarted = run(restart_cmd, {{"DDPTRAIN_FAULT_KILL_AT_STEP", "12"}, {"DDPTRAIN_FAULT_RANK", "1"}}, 300);
  ASSERT_EQ(restarted.exit_code, 0) << restarted.output;
  EXPECT_NE(restarted.output.find("restarting the workers (restart 1 of 1) after rank 1"), std::string::npos)
      << restarted.output;
  EXPECT_EQ(fingerprints(full.output)[0], fingerprints(restarted.output)[0]);
}

TEST(E2E, KilledDuringSaveAtEachStageThePreviousCheckpointSurvives) {
  // 512 samples, world 2, batch 16: 16 steps per epoch; checkpoints at steps 5 and 10.
  const int port = free_port();
  std::vector<std::string> extra = {"--dataset_size", "512", "--epochs", "1", "--save_every_steps", "5"};
  ProcResult full = run(launch(2, port, tiny_train(fresh_dir("save_full"), extra)), {}, 300);
  ASSERT_EQ(full.exit_code, 0) << full.output;
  auto resume_auto = [&](const std::string& dir) {
    auto args = tiny_train(dir, extra);
    args.insert(args.end(), {"--resume_from", "auto"});
    return run(launch(2, port, args), {}, 300);
  };
  for (const std::string stage : {"files_written", "manifest_written", "renamed"}) {
    SCOPED_TRACE(stage);
    const std::string dir = fresh_dir("save_" + stage);
    ProcResult killed = run(launch(2, port, tiny_train(dir, extra)), {{"DDPTRAIN_FAULT_KILL_IN_SAVE", stage + "@10"}}, 300);
    EXPECT_NE(killed.exit_code, 0) << killed.output;
    EXPECT_NE(killed.output.find("FAILED: rank 0"), std::string::npos) << killed.output;
    EXPECT_TRUE(fs::exists(dir + "/step_00000005/manifest.json")) << "the previous checkpoint was damaged";
    // Before the rename the interrupted save is only a leftover; after it, it is complete.
    const bool complete = stage == "renamed";
    EXPECT_EQ(fs::exists(dir + "/step_00000010/manifest.json"), complete);
    EXPECT_EQ(fs::exists(dir + "/.tmp-step_00000010"), !complete);
    ProcResult resumed = resume_auto(dir);
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_FALSE(lines_with(resumed.output, complete ? "step_00000010" : "step_00000005").empty()) << resumed.output;
    EXPECT_FALSE(fs::exists(dir + "/.tmp-step_00000010")) << "leftover not cleaned";
    EXPECT_EQ(fingerprints(full.output)[0], fingerprints(resumed.output)[0]) << resumed.output;
  }
  // Replacing a checkpoint of the same name (a rerun from step 5): a crash between moving
  // the old copy aside and renaming the new one into place loses neither.
  const std::string dir = fresh_dir("save_replace");
  auto first_args = tiny_train(dir, extra);
  first_args.insert(first_args.end(), {"--max_steps", "10"});
  ProcResult first = run(launch(2, port, first_args), {}, 300);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_TRUE(fs::exists(dir + "/step_00000010/manifest.json")) << first.output;
  auto rerun = first_args;
  rerun.insert(rerun.end(), {"--resume_from", dir + "/step_00000005"});
  ProcResult killed = run(launch(2, port, rerun), {{"DDPTRAIN_FAULT_KILL_IN_SAVE", "old_moved_aside@10"}}, 300);
  EXPECT_NE(killed.exit_code, 0) << killed.output;
  EXPECT_FALSE(fs::exists(dir + "/step_00000010"));
  EXPECT_TRUE(fs::exists(dir + "/.old-step_00000010/manifest.json"));
  ProcResult resumed = resume_auto(dir);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_FALSE(lines_with(resumed.output, "restoring " + dir + "/.old-step_00000010").empty()) << resumed.output;
  EXPECT_FALSE(lines_with(resumed.output, "resumed from " + dir + "/step_00000010").empty()) << resumed.output;
  EXPECT_EQ(fingerprints(full.output)[0], fingerprints(resumed.output)[0]) << resumed.output;
}

TEST(E2E, RestartBudgetIsExactAndRootCauseIsReported) {
  std::string ckpt = fresh_dir("budget");
  auto cmd = launch(2, free_port(), tiny_train(ckpt));
  cmd.insert(cmd.begin() + 2, {"--max_restarts", "2"});
  ProcResult r = run(cmd, {{"DDPTRAIN_FAULT_THROW_AT_STEP", "1"}, {"DDPTRAIN_FAULT_RANK", "1"}, {"DDPTRAIN_FAULT_ATTEMPT", "-1"}},
                     300);
  std::printf("restart budget 2, a worker that always raises: exit %d after %.1f s (3 attempts)\n", r.exit_code,
              r.seconds);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(lines_with(r.output, "restarting the workers").size(), 2u) << r.output;  // 3 attempts in all
  EXPECT_NE(r.output.find("FAILED: rank 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("root cause: [rank 1/2] injected fault (DDPTRAIN_FAULT_THROW_AT_STEP) after step 1"),
            std::string::npos) << r.output;
}

TEST(E2E, DamagedCheckpointStopsTheRunAndChangesNothing) {
  const std::vector<std::string> job = {"train", "--dataset_size", "64", "--image_size", "8", "--width", "0.125",
                                        "--batch_size", "16", "--num_workers", "0"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {binary()};
    a.insert(a.end(), job.begin(), job.end());
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  auto listing = [](const std::string& root) {
    std::vector<std::string> v;
    for (const auto& e : fs::recursive_directory_iterator(root))
      v.push_back(e.path().string() + ":" +
                  (e.is_regular_file() ? std::to_string(std::hash<std::string>{}(read_text(e.path().string()))) : "d"));
    std::sort(v.begin(), v.end());
    return v;
  };
  struct Case {
    std::string name;
    std::function<void(const std::string&)> damage;
    std::string expect;
    int world;
  } cases[] = {
      {"truncated", [](const std::string& d) { fs::resize_file(d + "/model.pt", fs::file_size(d + "/model.pt") - 1); },
       "model.pt has", 1},
      {"flipped",
       [](const std::string& d) {
         std::fstream f(d + "/optimizer.pt", std::ios::in | std::ios::out | std::ios::binary);
         f.seekg(100);
         char c = 0;
         f.read(&c, 1);
         c = static_cast<char>(c ^ 0x01);
         f.seekp(100);
         f.write(&c, 1);
       },
       "optimizer.pt fails its CRC-32 check", 1},
      {"world size", [](const std::string&) {}, "was written by a job of world size 1 but this job has 2", 2},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::string ckpt = fresh_dir("damaged");
    ProcResult first = run(with({"--epochs", "1", "--checkpoint_dir", ckpt}), {}, 120);
    ASSERT_EQ(first.exit_code, 0) << first.output;
    const std::string dir = ckpt + "/epoch_0001";
    c.damage(dir);
    auto before = listing(ckpt);
    auto args = with({"--epochs", "2", "--checkpoint_dir", ckpt, "--resume_from", dir});
    ProcResult r = c.world == 1 ? run(args, {}, 60)
                                : run(launch(2, free_port(), std::vector<std::string>(args.begin() + 1, args.end())), {}, 60);
    std::printf("damaged checkpoint (%s): exit %d after %.1f s\n", c.name.c_str(), r.exit_code, r.seconds);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_LT(r.seconds, 10.0);
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(dir), std::string::npos) << "the error does not name the checkpoint: " << r.output;
    EXPECT_EQ(listing(ckpt), before) << "a failed resume changed the checkpoint directory";
    if (c.world != 1) continue;
    // auto falls back to a fresh start (the only checkpoint is damaged) and says why.
    ProcResult a = run(with({"--epochs", "1", "--checkpoint_dir", ckpt, "--resume_from", "auto"}), {}, 60);
    EXPECT_EQ(a.exit_code, 0) << a.output;
    EXPECT_NE(a.output.find("skipping an invalid checkpoint"), std::string::npos) << a.output;
  }
}

TEST(E2E, InitFromAPythonStateDictAndExportForOtherTools) {
  const std::string dir = fresh_dir("interop");
  const std::string py = source_dir() + "/tests/python/interop.py";
  ProcResult saved = run({python(), py, "save_init", dir + "/init.pt", "0.125", "7"}, {}, 120);
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  // One step at a negligible lr: the parameters are still Python's (init seed 7, not ours 42).
  auto job = [&](const std::string& ckpt, std::vector<std::string> extra) {
    std::vector<std::string> a = {binary(), "train", "--dataset_size", "64", "--image_size", "8", "--width", "0.125",
                                  "--batch_size", "16", "--num_workers", "0", "--epochs", "1", "--max_steps", "1",
                                  "--lr", "1e-30", "--checkpoint_dir", ckpt};
    a.insert(a.end(), extra.begin(), extra.end());
    return run(a, {}, 120);
  };
  ProcResult r = job(dir + "/ck", {"--init_from", dir + "/init.pt"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(lines_with(r.output, "initial weights from " + dir + "/init.pt").empty()) << r.output;
  const std::string model_pt = dir + "/ck/step_00000001/model.pt";
  ProcResult same = run({python(), py, "same_params", dir + "/init.pt", model_pt, "1e-12"}, {}, 120);
  EXPECT_EQ(same.exit_code, 0) << same.output;
  ProcResult fresh = job(dir + "/ck_fresh", {});  // the check can fail: without init_from it does
  ASSERT_EQ(fresh.exit_code, 0) << fresh.output;
  ProcResult differ = run({python(), py, "same_params", dir + "/init.pt",
                           dir + "/ck_fresh/step_00000001/model.pt", "1e-12"}, {}, 120);
  EXPECT_EQ(differ.exit_code, 1) << differ.output;

  // Export: pt for torch.load, safetensors read back by the safetensors package (PyPI).
  for (const std::string fmt : {"pt", "safetensors"}) {
    ProcResult e = run({binary(), "export", "--checkpoint", dir + "/ck/step_00000001", "--format", fmt, "--out",
                        dir + "/weights." + fmt}, {}, 60);
    ASSERT_EQ(e.exit_code, 0) << e.output;
  }
  ProcResult check = run({python(), py, "check_export", dir + "/weights.pt", dir + "/weights.safetensors"},
                         {{"PYTHONPATH", source_dir() + "/.pydeps"}}, 120);
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_NE(check.output.find("EXPORT OK 92 tensors"), std::string::npos) << check.output;
  ProcResult same_pt = run({python(), py, "same_params", model_pt, dir + "/weights.pt", "0"}, {}, 120);
  EXPECT_EQ(same_pt.exit_code, 0) << same_pt.output;

  // Refusals: a pickle that would run code, the wrong model, a missing file, a bad format.
  ProcResult evil_py = run({python(), "-c",
                            "import torch\nclass E:\n  def __reduce__(self): return (print, ('ran',))\n"
                            "torch.save({'w': torch.zeros(1), 'e': E()}, '" + dir + "/evil.pt')"}, {}, 60);
  ASSERT_EQ(evil_py.exit_code, 0) << evil_py.output;
  ProcResult evil = job(dir + "/ck_evil", {"--init_from", dir + "/evil.pt"});
  EXPECT_EQ(evil.exit_code, 1) << evil.output;
  EXPECT_NE(evil.output.find("asks to call __builtin__.print"), std::string::npos) << evil.output;
  EXPECT_EQ(evil.output.find("\nran"), std::string::npos) << evil.output;
  ProcResult wrong = job(dir + "/ck_wrong", {"--init_from", dir + "/init.pt", "--width", "0.25"});
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.output.find("'stem.0.weight' has shape [8, 3, 3, 3] but the model expects [16, 3, 3, 3]"),
            std::string::npos) << wrong.output;
  EXPECT_EQ(job(dir + "/ck_missing", {"--init_from", dir + "/nope.pt"}).exit_code, 2);
  ProcResult bad = run({binary(), "export", "--checkpoint", dir + "/ck/step_00000001", "--format", "onnx", "--out",
                        dir + "/w.onnx"}, {}, 60);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--format='onnx' must be pt or safetensors"), std::string::npos) << bad.output;
}

TEST(E2E, MetricsFileMfuAndInspectModel) {
  const std::string dir = fresh_dir("metrics");
  const std::string path = dir + "/run/metrics.jsonl";
  ProcResult r = run(launch(2, free_port(), tiny_train(dir, {"--epochs", "2", "--metrics_file", path,
                                                              "--tensorboard_dir", dir + "/tb", "--grad_scaler", "on",
                                                              "--clip_grad_norm", "5"})),
                     {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(lines_with(r.output, "peak for MFU: CPU peak measured at start-up on 1 threads").empty())
      << r.output;
  EXPECT_FALSE(lines_with(r.output, "% | peak mem ").empty()) << "no MFU in the step line: " << r.output;
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  int steps = 0, epochs = 0;
  int64_t last_step = 0;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);  // every line is one JSON record
    const std::string kind = j.at("kind");
    for (const char* k : {"step", "epoch", "time_s"}) EXPECT_TRUE(j.contains(k)) << k << " missing: " << line;
    EXPECT_GE(j.at("step").get<int64_t>(), last_step);
    last_step = j.at("step").get<int64_t>();
    if (kind == "step") {
      ++steps;
      for (const char* k : {"loss", "lr", "samples_per_s", "ms_per_step", "mfu", "comm_wait_ms", "peak_mem_mib",
                            "data_ms", "fwd_ms", "bwd_ms", "opt_ms", "data_wait_share", "loss_scale", "grad_norm",
                            "allreduces_per_step", "allreduce_mib_per_step"})
        EXPECT_TRUE(j.contains(k)) << k << " missing: " << line;
      EXPECT_GT(j.at("mfu").get<double>(), 0.0) << line;
      EXPECT_LT(j.at("mfu").get<double>(), 1.0) << line;
      EXPECT_GT(j.at("samples_per_s").get<double>(), 0.0) << line;
    } else {
      ASSERT_EQ(kind, "epoch") << line;
      ++epochs;
      for (const char* k : {"train_loss", "train_acc", "epoch_s", "peak_mem_mib_per_rank"})
        EXPECT_TRUE(j.contains(k)) << k << " missing: " << line;
      EXPECT_EQ(j.at("peak_mem_mib_per_rank").size(), 2u) << line;
    }
  }
  EXPECT_EQ(epochs, 2);
  EXPECT_EQ(steps, 2 * 2);  // 8 steps per epoch, a line every 4
  EXPECT_EQ(last_step, 16);

  // TensorBoard's own reader (PyPI tensorboard, kept apart from torch's numpy) finds the
  // same numbers in the event file.
  ProcResult tb = run({"/usr/bin/python3", "-s", source_dir() + "/tests/python/read_tensorboard.py", dir + "/tb", path},
                      {{"PYTHONPATH", source_dir() + "/.pydeps-tb"}}, 120);
  EXPECT_EQ(tb.exit_code, 0) << tb.output;
  EXPECT_NE(tb.output.find("TB OK"), std::string::npos) << tb.output;

  // The plot: a well-formed SVG with the four panels, one run and two overlaid.
  ProcResult p1 = run({binary(), "plot", path, "-o", dir + "/run.svg"}, {}, 60);
  ASSERT_EQ(p1.exit_code, 0) << p1.output;
  const std::string svg = read_text(dir + "/run.svg");
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  for (const char* title : {">loss<", ">accuracy<", ">samples/s (global)<", ">MFU<"})
    EXPECT_NE(svg.find(title), std::string::npos) << title;
  fs::copy_file(path, dir + "/other.jsonl");
  ProcResult p2 = run({binary(), "plot", path, dir + "/other.jsonl", "-o", dir + "/cmp.svg"}, {}, 60);
  ASSERT_EQ(p2.exit_code, 0) << p2.output;
  const std::string cmp = read_text(dir + "/cmp.svg");
  size_t polylines = 0;
  for (size_t at = cmp.find("<polyline"); at != std::string::npos; at = cmp.find("<polyline", at + 1)) ++polylines;
  EXPECT_EQ(polylines, 2u * 4u) << "2 runs x (train loss, train accuracy, samples/s, MFU); synthetic data has no test split";
  EXPECT_NE(cmp.find("other train"), std::string::npos) << "no legend per run";
  ProcResult xml = run({python(), "-c", "import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1]); print('XML OK')",
                        dir + "/cmp.svg"}, {}, 60);
  EXPECT_NE(xml.output.find("XML OK"), std::string::npos) << xml.output;
  EXPECT_EQ(run({binary(), "plot", dir + "/missing.jsonl", "-o", dir + "/x.svg"}, {}, 60).exit_code, 2);

  ProcResult m = run({binary(), "inspect", "model", "--width", "0.125", "--image_size", "8"}, {}, 60);
  ASSERT_EQ(m.exit_code, 0) << m.output;
  EXPECT_NE(m.output.find("forward FLOPs per sample: 847488"), std::string::npos) << m.output;
  EXPECT_NE(m.output.find("training FLOPs per sample (3 x forward): 2542464"), std::string::npos) << m.output;
  EXPECT_NE(m.output.find("stages.2.shortcut.0"), std::string::npos) << m.output;
}

TEST(E2E, ProgressBarOnATerminalPlainStepLinesOtherwise) {
  const std::string dir = fresh_dir("progress");
  const std::string cmd = binary() + " train --dataset_size 256 --image_size 8 --width 0.125 --batch_size 16 "
                          "--num_workers 1 --epochs 1 --threads 1 --log_interval 4 --checkpoint_dir " + dir;
  // `script` runs the command on a pseudo-terminal, as a user's shell would.
  ProcResult tty = run({"script", "-qfec", cmd, "/dev/null"}, {{"TERM", "xterm"}}, 120);
  ASSERT_EQ(tty.exit_code, 0) << tty.output;
  EXPECT_NE(tty.output.find("\r\033[Kepoch 1 [##############################] 16/16  ETA 0:00"), std::string::npos)
      << tty.output;
  EXPECT_TRUE(lines_with(tty.output, "ms/step").empty()) << "step lines on a terminal: " << tty.output;
  EXPECT_FALSE(lines_with(tty.output, "epoch 1 done").empty()) << tty.output;
  ProcResult plain = run({"/bin/sh", "-c", cmd}, {}, 120);  // output to a pipe
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(plain.output.find("ETA"), std::string::npos) << plain.output;
  EXPECT_EQ(lines_with(plain.output, "ms/step").size(), 4u) << plain.output;
}

TEST(E2E, TensorFileDatasetWrittenByPython) {
  const std::string dir = fresh_dir("tensors");
  ProcResult py = run({python(), "-c",
                       "import sys, torch\ng = torch.Generator().manual_seed(0)\n"
                       "for split, n in (('train', 96), ('test', 40)):\n"
                       "    x = torch.randint(0, 256, (n, 1, 12, 12), dtype=torch.uint8, generator=g)\n"
                       "    y = torch.randint(0, 4, (n,), generator=g)\n"
                       "    torch.save({'images': x, 'labels': y}, sys.argv[1] + '/' + split + '.pt')\n"
                       "torch.save({'images': torch.zeros(4, 1, 2, 2), 'labels': torch.zeros(4)}, sys.argv[1] + '/bad.pt')\n",
                       dir}, {}, 120);
  ASSERT_EQ(py.exit_code, 0) << py.output;
  auto job = [&](const std::string& data_dir) {
    return run({binary(), "train", "--dataset", "tensors", "--data_dir", data_dir, "--width", "0.125", "--batch_size",
                "16", "--epochs", "1", "--num_workers", "1", "--checkpoint_dir", dir + "/ck"}, {}, 120);
  };
  ProcResult r = job(dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(lines_with(r.output, "data tensors: 96 samples, 6 steps per epoch").empty()) << r.output;
  EXPECT_FALSE(lines_with(r.output, "test acc").empty()) << "test.pt was not evaluated: " << r.output;
  fs::create_directories(dir + "/bad");
  fs::copy_file(dir + "/bad.pt", dir + "/bad/train.pt");
  ProcResult bad = job(dir + "/bad");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("bad/train.pt': labels must be int64"), std::string::npos) << bad.output;
}

TEST(E2E, EvalCountsTheTestSetOnceForAnyWorldSize) {
  // Train 1 epoch on Fashion-MNIST (a slice: --max_steps), then evaluate the checkpoint at
  // world 1, 2 and 3: every run counts exactly the 10,000 test images and agrees.
  const std::string ckpt = fresh_dir("eval");
  ProcResult t = run({binary(), "train", "--dataset", "fashion-mnist", "--width", "0.125", "--batch_size", "64",
                      "--max_steps", "20", "--lr", "0.05", "--num_workers", "1", "--eval_every", "0",
                      "--checkpoint_dir", ckpt}, {}, 300);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_TRUE(lines_with(t.output, "test acc").empty()) << "--eval_every 0 evaluated: " << t.output;
  std::vector<std::string> accs;
  for (int world : {1, 2, 3}) {
    std::vector<std::string> eval = {"eval", "--checkpoint", ckpt + "/step_00000020", "--batch_size", "256"};
    ProcResult r = world == 1 ? run([&] { auto a = eval; a.insert(a.begin(), binary()); return a; }(), {}, 300)
                              : run(launch(world, free_port(), eval), {}, 300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto l = lines_with(r.output, "test split: 10000 samples");
    ASSERT_EQ(l.size(), 1u) << "world " << world << ": " << r.output;
    accs.push_back(l[0].substr(l[0].find("test acc")));
  }
  EXPECT_EQ(accs[0], accs[1]);
  EXPECT_EQ(accs[0], accs[2]);
  ProcResult missing = run({binary(), "eval"}, {}, 60);
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
}

TEST(E2E, SingleProcessByDefault) {
  std::string ckpt = fresh_dir("single");
  std::vector<std::string> argv = {binary()};
  auto t = tiny_train(ckpt, {"--epochs", "1", "--max_steps", "6", "--log_interval", "1", "--enable_profiling"});
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
  }
  EXPECT_EQ(phases, (std::map<std::string, int>{{"bwd", 3}, {"data", 3}, {"fwd", 3}, {"opt", 3}}));
  EXPECT_EQ(steps, (std::set<int64_t>{2, 3, 4}));
}

TEST(E2E, LauncherReportsAKilledWorkerAndLeavesNothingBehind) {
  // World 4: SIGKILL rank 2 mid-training; every process is gone well within 60 s.
  std::string ckpt = fresh_dir("killed");
  std::string out = ckpt + "/launch.log";
  auto worker = tiny_train(ckpt, {"--dataset_size", "2000000", "--epochs", "1"});
  pid_t launcher = spawn(launch(4, free_port(), worker), out);
  std::vector<pid_t> kids = wait_for_children(launcher, 4);
  ASSERT_EQ(kids.size(), 4u);
  // Wait until training runs (a step line), then kill rank 2.
  for (int i = 0; i < 600 && read_text(out).find("samples/s") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  pid_t victim = -1;
  for (pid_t k : kids)
    if (environ_of(k, "RANK") == "2") victim = k;
  ASSERT_NE(victim, -1);
  auto t0 = std::chrono::steady_clock::now();
  ::kill(victim, SIGKILL);
  int code = wait_for(launcher, 60);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("world 4, rank 2 SIGKILLed: launcher exited with %d, %.1f s after the kill\n", code, secs);
  if (code == -1) ::kill(launcher, SIGKILL);
  ASSERT_NE(code, -1) << "launcher still running 60 s after a worker was killed";
  EXPECT_NE(code, 0);
  const std::string log = read_text(out);
  EXPECT_NE(log.find("FAILED: rank 2 (pid " + std::to_string(victim) + ") was killed by signal 9"), std::string::npos) << log;
  for (pid_t k : kids) EXPECT_FALSE(alive(k)) << "worker " << k << " left behind";
}

TEST(E2E, MasterPortInUseIsAClearErrorWithinTenSeconds) {
  // Another program listens on the port (and accepts connections, but never answers).
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  ProcResult r = run(launch(2, port, tiny_train(fresh_dir("port_in_use"))), {}, 60);
  ::close(fd);
  std::printf("MASTER_PORT in use: exit %d after %.1f s\n", r.exit_code, r.seconds);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.seconds, 10.0) << r.output;
  EXPECT_NE(r.output.find("MASTER_PORT " + std::to_string(port) + " is already in use"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("root cause: [rank 0/2] MASTER_PORT"), std::string::npos) << r.output;
}

TEST(E2E, AHungWorkerEndsTheJobWithinTimeoutPlusGrace) {
  // Rank 1 hangs (ignoring SIGTERM) after step 3; rank 0's next collective times out after
  // --dist_timeout_s, it fails naming the operation, and the launcher SIGKILLs the hung rank
  // after its grace period.
  std::string ckpt = fresh_dir("hung");
  auto cmd = launch(2, free_port(), tiny_train(ckpt, {"--dist_timeout_s", "3"}));
  cmd.insert(cmd.begin() + 2, {"--kill_grace_s", "2"});
  ProcResult r = run(cmd, {{"DDPTRAIN_FAULT_HANG_AT_STEP", "3"}, {"DDPTRAIN_FAULT_RANK", "1"}}, 120);
  std::printf("hung worker: launcher exited with %d after %.1f s in all\n", r.exit_code, r.seconds);
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.seconds, 3 + 2 + 20.0) << r.output;  // timeout + grace + start-up and 3 steps
  EXPECT_NE(r.output.find("FAILED: rank 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("buffer broadcast before forward (--broadcast_buffers) failed (gloo, timeout 3 s)"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1 (pid"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("did not stop within 2 s of SIGTERM (hung?)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("frame #"), std::string::npos) << "a C++ backtrace in a user-facing error: " << r.output;
}

TEST(E2E, LauncherForwardsSigterm) {
  std::string ckpt = fresh_dir("sigterm");
  std::string out = ckpt + "/launch.log";
  pid_t launcher = spawn(launch(2, free_port(), tiny_train(ckpt, {"--dataset_size", "2000000", "--log_interval", "1"})), out);
  std::vector<pid_t> kids = wait_for_children(launcher, 2);
  ASSERT_EQ(kids.size(), 2u);
  // Signal only once training runs (before that, SIGTERM simply ends a worker).
  for (int i = 0; i < 600 && lines_with(read_text(out), "samples/s").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ::kill(launcher, SIGTERM);
  int code = wait_for(launcher, 30);
  if (code == -1) ::kill(launcher, SIGKILL);
  ASSERT_EQ(code, 128 + SIGTERM);
  std::ifstream in(out);
  std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(log.find("forwarding to the workers"), std::string::npos) << log;
  // The workers finished their step and saved where they were (--checkpoint_on_signal).
  EXPECT_NE(log.find("stopping after step"), std::string::npos) << log;
  bool saved = false;
  for (const auto& e : fs::directory_iterator(ckpt))
    saved |= e.path().filename().string().rfind("step_", 0) == 0 && fs::exists(e.path() / "manifest.json");
  EXPECT_TRUE(saved) << log;
  for (pid_t k : kids) EXPECT_FALSE(alive(k)) << "worker " << k << " left behind";
}

TEST(E2E, MismatchedModelsFailOnEveryRankWithoutHanging) {
  // Two ranks started by hand with different --width: both must stop, naming the parameter.
  std::string ckpt = fresh_dir("mismatch");
  const std::string port = std::to_string(free_port());
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> argv = {binary()};
    auto t = tiny_train(ckpt, {"--width", r == 0 ? "0.125" : "0.25", "--dist_timeout_s", "20"});
    argv.insert(argv.end(), t.begin(), t.end());
    pids.push_back(spawn(argv, ckpt + "/rank" + std::to_string(r) + ".log",
                         {{"RANK", std::to_string(r)}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                          {"MASTER_PORT", port}}));
  }
  for (int r = 0; r < 2; ++r) {
    int code = wait_for(pids[static_cast<size_t>(r)], 30);
    if (code == -1) ::kill(pids[static_cast<size_t>(r)], SIGKILL);
    std::ifstream in(ckpt + "/rank" + std::to_string(r) + ".log");
    std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(code, -1) << "rank " << r << " still running after 30 s";
    EXPECT_NE(code, 0) << log;
    EXPECT_NE(log.find("do not build the same model"), std::string::npos) << log;
    if (r == 1) {
      EXPECT_NE(log.find("stem.0.weight [8, 3, 3, 3]"), std::string::npos) << log;
    }
  }
}

TEST(E2E, SyncBatchNormAndAccumulationKeepReplicasBitwiseEqual) {
  std::string ckpt = fresh_dir("syncbn");
  ProcResult r = run(launch(2, free_port(), tiny_train(ckpt, {"--epochs", "1", "--sync_bn", "--grad_accum_steps", "2",
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

TEST(E2E, MixedPrecisionScalingAndRecompute) {
  const int port = free_port();
  // A NaN in rank 1's loss at step 3: the all-reduce spreads it, every rank skips step 3,
  // the scale backs off, and the replicas stay bitwise equal.
  ProcResult nan = run(launch(2, port, tiny_train(fresh_dir("amp_nan"), {"--epochs", "1", "--grad_scaler", "on",
                                                                          "--clip_grad_norm", "1.0"})),
                       {{"DDPTRAIN_FAULT_NAN_AT_STEP", "3"}, {"DDPTRAIN_FAULT_RANK", "1"}}, 300);
  ASSERT_EQ(nan.exit_code, 0) << nan.output;
  EXPECT_EQ(lines_with(nan.output, "optimizer step 3 skipped: inf/NaN gradients; loss scale now 32768").size(), 2u)
      << nan.output;
  EXPECT_EQ(lines_with(nan.output, "skipped:").size(), 2u) << "only step 3 is skipped: " << nan.output;
  EXPECT_FALSE(lines_with(nan.output, "1 steps skipped (inf/NaN)").empty()) << nan.output;
  auto fp = fingerprints(nan.output);
  ASSERT_EQ(fp.size(), 2u) << nan.output;
  EXPECT_EQ(fp[0], fp[1]) << "ranks diverged after a skipped step";
  EXPECT_NE(fp[0].find_first_not_of("0"), std::string::npos);

  // Recompute under DDP, with dropout: bitwise the run without it.
  std::vector<std::string> drop = {"--epochs", "1", "--dropout", "0.1"};
  ProcResult plain = run(launch(2, port, tiny_train(fresh_dir("rc_plain"), drop)), {}, 300);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  drop.insert(drop.end(), {"--activation_checkpointing", "blocks"});
  ProcResult rc = run(launch(2, port, tiny_train(fresh_dir("rc_on"), drop)), {}, 300);
  ASSERT_EQ(rc.exit_code, 0) << rc.output;
  EXPECT_FALSE(lines_with(rc.output, "activation checkpointing: each residual block is recomputed").empty());
  EXPECT_EQ(fingerprints(plain.output)[0], fingerprints(rc.output)[0]) << "recompute changed the result";
  EXPECT_EQ(fingerprints(rc.output)[0], fingerprints(rc.output)[1]);

  // A partial accumulation group ends each epoch: 256 samples / 2 ranks / batch 16 = 8
  // micro-batches, K = 3 -> steps of 3, 3 and 2.
  ProcResult acc = run(launch(2, port, tiny_train(fresh_dir("acc_partial"), {"--epochs", "1", "--grad_accum_steps", "3",
                                                                             "--log_interval", "1"})), {}, 300);
  ASSERT_EQ(acc.exit_code, 0) << acc.output;
  EXPECT_FALSE(lines_with(acc.output, "accumulates 2 micro-batches instead of 3").empty()) << acc.output;
  EXPECT_FALSE(lines_with(acc.output, "epoch 1 step 3/3").empty()) << acc.output;
}

TEST(E2E, Bf16OnCpuTrainsFashionMnist) {
  ProcResult r = run({binary(), "train", "--dataset", "fashion-mnist", "--width", "0.25", "--batch_size", "64",
                      "--lr", "0.05", "--max_steps", "50", "--log_interval", "10", "--amp_dtype", "bf16",
                      "--num_workers", "1", "--checkpoint_dir", fresh_dir("bf16")}, {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(lines_with(r.output, "precision: bf16 autocast on CPU").empty()) << r.output;
  std::vector<double> losses;
  for (const auto& l : lines_with(r.output, " | loss ")) losses.push_back(std::stod(l.substr(l.find(" | loss ") + 8)));
  ASSERT_EQ(losses.size(), 5u) << r.output;
  std::printf("bf16 Fashion-MNIST loss every 10 steps:");
  for (double v : losses) std::printf(" %.4f", v);
  std::printf("\n");
  EXPECT_LT(losses.back(), losses.front() * 0.8) << r.output;
}

TEST(E2E, RunsUnderTorchrun) {
  std::string ckpt = fresh_dir("torchrun");
  std::vector<std::string> argv = {python(), source_dir() + "/tests/python/torchrun_wrapper.py",
                                   "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
                                   "--master_port", std::to_string(free_port()), "--no_python", binary()};
  auto t = tiny_train(ckpt, {"--epochs", "1"});
  argv.insert(argv.end(), t.begin(), t.end());
  ProcResult r = run(argv, {{"OMP_NUM_THREADS", "1"}}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(lines_with(r.output, "DDP: world 2, backend gloo").empty()) << r.output;
  std::vector<std::string> fps;
  for (const auto& l : lines_with(r.output, "parameter fingerprint: ")) fps.push_back(l.substr(l.rfind(' ') + 1));
  ASSERT_EQ(fps.size(), 2u) << r.output;
  EXPECT_EQ(fps[0], fps[1]);
  EXPECT_TRUE(fs::exists(ckpt + "/epoch_0001/model.pt"));

  // A worker that raises: torchrun's root-cause report quotes our error file.
  argv[7] = std::to_string(free_port());  // the --master_port value
  ProcResult failed = run(argv, {{"OMP_NUM_THREADS", "1"}, {"DDPTRAIN_FAULT_THROW_AT_STEP", "2"},
                                 {"DDPTRAIN_FAULT_RANK", "1"}}, 300);
  std::printf("torchrun, rank 1 raises after step 2: exit %d after %.1f s\n", failed.exit_code, failed.seconds);
  EXPECT_NE(failed.exit_code, 0) << failed.output;
  const size_t root = failed.output.find("Root Cause (first observed failure):");
  ASSERT_NE(root, std::string::npos) << failed.output;
  const std::string report = failed.output.substr(root);
  EXPECT_NE(report.find("rank      : 1 (local_rank: 1)"), std::string::npos) << report;
  EXPECT_NE(report.find("traceback : [rank 1/2] injected fault (DDPTRAIN_FAULT_THROW_AT_STEP) after step 2"),
            std::string::npos) << report;
}

// Two "nodes" as network namespaces joined by a veth pair: one launcher per node, Gloo bound
// to the veth interface by GLOO_SOCKET_IFNAME, the TCPStore on node 0's address.
class MultiNode : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "network namespaces need root (CI runs as root)";
    tag_ = std::to_string(::getpid() % 100000);
    ns_[0] = "ddpt" + tag_ + "a";
    ns_[1] = "ddpt" + tag_ + "b";
    const std::string v0 = "dv" + tag_ + "a", v1 = "dv" + tag_ + "b";
    ifname_[0] = v0;
    ifname_[1] = v1;
    for (const std::string& cmd : {"ip netns add " + ns_[0], "ip netns add " + ns_[1],
                                   "ip link add " + v0 + " type veth peer name " + v1,
                                   "ip link set " + v0 + " netns " + ns_[0], "ip link set " + v1 + " netns " + ns_[1],
                                   "ip -n " + ns_[0] + " addr add 10.213.0.1/24 dev " + v0,
                                   "ip -n " + ns_[1] + " addr add 10.213.0.2/24 dev " + v1,
                                   "ip -n " + ns_[0] + " link set " + v0 + " up", "ip -n " + ns_[1] + " link set " + v1 + " up",
                                   "ip -n " + ns_[0] + " link set lo up", "ip -n " + ns_[1] + " link set lo up"}) {
      ProcResult r = run({"/bin/sh", "-c", cmd}, {}, 30);
      ASSERT_EQ(r.exit_code, 0) << cmd << ": " << r.output;
    }
  }
  void TearDown() override {
    for (const auto& ns : ns_)
      if (!ns.empty()) run({"/bin/sh", "-c", "ip netns del " + ns + " 2>/dev/null"}, {}, 30);
  }
  std::string tag_, ns_[2], ifname_[2];
};

TEST_F(MultiNode, TwoNodesOverNetworkNamespaces) {
  std::string ckpt[2] = {fresh_dir("node0"), fresh_dir("node1") + "/ckpt"};
  std::string log0 = fresh_dir("node0_log") + "/out.log";
  auto node = [&](int n) {
    std::vector<std::string> a = {"ip", "netns", "exec", ns_[n], "env", "GLOO_SOCKET_IFNAME=" + ifname_[n], binary(),
                                  "launch", "--nnodes", "2", "--node_rank", std::to_string(n), "--nproc_per_node", "1",
                                  "--master_addr", "10.213.0.1", "--master_port", "29577"};
    auto t = tiny_train(ckpt[n], {"--epochs", "1"});
    a.insert(a.end(), t.begin(), t.end());
    return a;
  };
  pid_t node0 = spawn(node(0), log0);
  ProcResult node1 = run(node(1), {}, 120);
  int code0 = wait_for(node0, 60);
  if (code0 == -1) ::kill(node0, SIGKILL);
  std::ifstream in(log0);
  std::string out0((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(node1.exit_code, 0) << node1.output;
  ASSERT_EQ(code0, 0) << out0;
  EXPECT_FALSE(lines_with(out0, "DDP: world 2, backend gloo").empty()) << out0;
  auto fp0 = fingerprints(out0), fp1 = fingerprints(node1.output);
  ASSERT_EQ(fp0.count(0), 1u) << out0;
  ASSERT_EQ(fp1.count(1), 1u) << node1.output;
  EXPECT_EQ(fp0[0], fp1[1]) << "nodes diverged";
  EXPECT_TRUE(fs::exists(ckpt[0] + "/epoch_0001/model.pt"));
  EXPECT_FALSE(fs::exists(ckpt[1])) << "only rank 0 writes checkpoints";
}

TEST_F(MultiNode, TwoNodesOfTwoWorkersEqualOneHostOfFourAndAKilledHostEndsTheJob) {
  auto node = [&](int n, const std::string& ckpt, std::vector<std::string> extra) {
    std::vector<std::string> a = {"ip", "netns", "exec", ns_[n], "env", "GLOO_SOCKET_IFNAME=" + ifname_[n], binary(),
                                  "launch", "--nnodes", "2", "--node_rank", std::to_string(n), "--nproc_per_node", "2",
                                  "--master_addr", "10.213.0.1", "--master_port", "29578"};
    auto t = tiny_train(ckpt, extra);
    a.insert(a.end(), t.begin(), t.end());
    return a;
  };
  // World 4 on one host, then as 2 nodes x 2 workers: the same parameters, bitwise.
  ProcResult single = run(launch(4, free_port(), tiny_train(fresh_dir("one_host4"), {"--epochs", "1"})), {}, 300);
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const std::string log0 = fresh_dir("node0_4_log") + "/out.log";
  pid_t node0 = spawn(node(0, fresh_dir("node0_4"), {"--epochs", "1"}), log0);
  ProcResult node1 = run(node(1, fresh_dir("node1_4"), {"--epochs", "1"}), {}, 300);
  int code0 = wait_for(node0, 120);
  if (code0 == -1) ::kill(node0, SIGKILL);
  const std::string out0 = read_text(log0);
  ASSERT_EQ(node1.exit_code, 0) << node1.output;
  ASSERT_EQ(code0, 0) << out0;
  EXPECT_FALSE(lines_with(out0, "DDP: world 4, backend gloo").empty()) << out0;
  auto fp_single = fingerprints(single.output), fp0 = fingerprints(out0), fp1 = fingerprints(node1.output);
  ASSERT_EQ(fp_single.size(), 4u) << single.output;
  ASSERT_EQ(fp0.size(), 2u) << out0;
  ASSERT_EQ(fp1.size(), 2u) << node1.output;
  for (int r : {0, 1}) EXPECT_EQ(fp0[r], fp_single[0]) << "rank " << r;
  for (int r : {2, 3}) EXPECT_EQ(fp1[r], fp_single[0]) << "rank " << r;

  // Kill node 1's launcher (SIGKILL: its workers die with it): node 0 ends, non-zero, in time.
  const std::string log_a = fresh_dir("kill_node0_log") + "/out.log", log_b = fresh_dir("kill_node1_log") + "/out.log";
  const std::vector<std::string> long_job = {"--dataset_size", "2000000", "--epochs", "1", "--dist_timeout_s", "20"};
  pid_t a = spawn(node(0, fresh_dir("kill_node0"), long_job), log_a);
  pid_t b = spawn(node(1, fresh_dir("kill_node1"), long_job), log_b);
  for (int i = 0; i < 600 && read_text(log_a).find("samples/s") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_NE(read_text(log_a).find("samples/s"), std::string::npos) << read_text(log_a) << read_text(log_b);
  // `ip netns exec` runs the launcher in place (exec), so b is node 1's launcher.
  auto t0 = std::chrono::steady_clock::now();
  ::kill(b, SIGKILL);
  int code_a = wait_for(a, 60);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("node 1's launcher SIGKILLed: node 0's launcher exited with %d after %.1f s\n", code_a, secs);
  if (code_a == -1) ::kill(a, SIGKILL);
  wait_for(b, 10);
  ASSERT_NE(code_a, -1) << "node 0 still running 60 s after node 1 died: " << read_text(log_a);
  EXPECT_NE(code_a, 0) << read_text(log_a);
  EXPECT_LT(secs, 20 + 5 + 5.0) << read_text(log_a);  // within --dist_timeout_s + grace
  EXPECT_NE(read_text(log_a).find("launch: FAILED: rank"), std::string::npos) << read_text(log_a);
}
