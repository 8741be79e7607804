// Elastic membership under torchrun (#16 item 2; torchrun's own engine, c10d rendezvous): two
// "nodes" (network namespaces) of two workers each, `--nnodes 1:2 --max_restarts 3`, train
// with --resume_from auto into one checkpoint folder; node 1 dies (every process of its
// namespace SIGKILLed) mid-epoch. Node 0's workers fail their collective, its agent restarts
// them at world 2, they resume from the newest checkpoint (Note [Resume at another world
// size]) and the job finishes. Every sample of the interrupted epoch is trained once across
// the two attempts (a padding repeat aside), read from the sample traces; the time from the
// node's death to training again is printed. Then node 1 comes back: the job grows to world 4
// (torchrun stops the workers with SIGTERM, they agree to stop and save; the new group resumes)
// and finishes its last epoch there.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "e2e_helpers.h"
#include "netns.h"
#include "proc.h"

using namespace ddptrain::e2e;
namespace fs = std::filesystem;

namespace {

// Every index traced in `epoch` by runs of `world`, micro-batches below micro_to (-1: all).
void collect(const std::vector<std::string>& files, int world, int epoch, int64_t micro_to,
             std::vector<int64_t>& out) {
  for (const auto& f : files)
    for (const auto& run : read_sample_trace(f)) {
      if (run.world != world || !run.epochs.count(epoch)) continue;
      for (const auto& [micro, ids] : run.epochs.at(epoch))
        if (micro_to < 0 || micro < micro_to) out.insert(out.end(), ids.begin(), ids.end());
    }
}

// resume_auto false: the flags' own start (a fresh one), which a restart overrides.
std::vector<std::string> train_args(const std::string& dir, const std::string& trace, bool resume_auto = true,
                                    const std::string& epochs = "4") {
  std::vector<std::string> a = {"train",
                                "--dataset_size",
                                "4000",
                                "--image_size",
                                "8",
                                "--width",
                                "0.125",
                                "--batch_size",
                                "8",
                                "--num_workers",
                                "1",
                                "--epochs",
                                epochs,
                                "--lr",
                                "0.05",
                                "--log_interval",
                                "20",
                                "--threads",
                                "1",
                                "--no-use_amp",
                                "--eval_every",
                                "0",
                                "--checkpoint_dir",
                                dir + "/ck",
                                "--save_every_steps",
                                "20",
                                "--keep_checkpoints",
                                "0",
                                "--dist_timeout_s",
                                "30",
                                "--metrics_file",
                                dir + "/m.jsonl",
                                "--trace_samples_dir",
                                trace};
  if (resume_auto) a.insert(a.end(), {"--resume_from", "auto"});
  return a;
}

// A node's torchrun agent (--nnodes 1:2, 2 workers each, the c10d rendezvous `id` on node 0's
// address at `port`) in namespace `ns` running ddptrain with `worker`. With `go`, parked: torch
// imported and the agent waiting for the file `go` before it reads its arguments and meets the
// rendezvous. A node that joins later is started parked long before it is needed: started only
// when it was due, its Python took 8.6 s to import torch on a loaded 2-core machine, and the job
// (its agent and the rendezvous store with it) could finish before the node reached the store.
std::vector<std::string> agent(int node, const std::string& ns, const std::string& ifname,
                               const std::string& port, const std::string& id,
                               const std::vector<std::string>& worker, const std::string& go = "",
                               const std::vector<std::string>& env = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"},
                               const std::string& nnodes = "1:2", const std::string& program = binary()) {
  const std::string addr[2] = {"10.213.0.1", "10.213.0.2"};
  std::vector<std::string> run_agent = {"-m", "torch.distributed.run"};
  if (!go.empty())
    run_agent = {"-c",
                 "import os, sys, time\nimport torch.distributed.run as run\ngo = sys.argv.pop(1)\n"
                 "while not os.path.exists(go): time.sleep(0.05)\nrun.main()\n",
                 go};
  std::vector<std::string> a = {
      "ip", "netns", "exec", ns, "env", "GLOO_SOCKET_IFNAME=" + ifname, "OMP_NUM_THREADS=1"};
  a.insert(a.end(), env.begin(), env.end());
  a.push_back(python());
  a.insert(a.end(), run_agent.begin(), run_agent.end());
  const std::vector<std::string> flags = {
      "--nnodes",           nnodes,
      "--nproc_per_node",   "2",
      "--max_restarts",     "3",
      "--rdzv_backend",     "c10d",
      "--rdzv_endpoint",    addr[0] + ":" + port,
      "--rdzv_id",          id,
      "--rdzv_conf",        std::string("last_call_timeout=2,is_host=") + (node == 0 ? "1" : "0"),
      "--monitor_interval", "1",
      "--local_addr",       addr[node],
      "--no-python",        program};
  a.insert(a.end(), flags.begin(), flags.end());
  a.insert(a.end(), worker.begin(), worker.end());
  return a;
}

double now_unix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

TEST_F(MultiNode, ElasticUnderTorchrunLosesANodeAndFinishes) {
  ProcResult version = run({python(), "-c", "import torch; print(torch.__version__)"}, {}, 60);
  if (version.output.rfind("1.", 0) == 0) GTEST_SKIP() << "elastic membership needs the LibTorch 2.x build";
  const std::string dir = fresh_dir("elastic"), ref = fresh_dir("elastic_ref");
  // The world-4 order of epoch 1, from one host.
  ProcResult reference = run(launch(4, free_port(), train_args(ref, ref + "/trace")), {}, 300);
  ASSERT_EQ(reference.exit_code, 0) << reference.output;

  const std::string port = std::to_string(free_port());
  auto node = [&](int n, const std::string& go = "") {
    return agent(n, ns_[n], ifname_[n], port, "elastic" + tag_,
                 train_args(dir, dir + "/trace" + std::to_string(n)), go);
  };
  const pid_t n0 = spawn(node(0), dir + "/node0.log"), n1 = spawn(node(1), dir + "/node1.log");
  for (int i = 0; i < 1200 && !fs::exists(dir + "/ck/step_00000040"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(fs::exists(dir + "/ck/step_00000040"))
      << read_text(dir + "/node0.log") << read_text(dir + "/node1.log");
  const double died = now_unix();
  run({"/bin/sh", "-c", "ip netns pids " + ns_[1] + " | xargs -r kill -9"}, {}, 30);  // node 1 dies
  wait_for(n1, 10);
  // Node 1's return, parked until world 2 has trained an epoch (see node above).
  const std::string go = dir + "/node1_back.go";
  const pid_t back = spawn(node(1, go), dir + "/node1_back.log");
  // Node 1 comes back once world 2 has finished epoch 1: the job grows to world 4 again (its
  // agent stops the workers with SIGTERM: they agree to stop, save, and resume at world 4).
  auto world_two_finished_epoch_one = [&] {
    bool at_two = false;
    for (const auto& rec : read_jsonl(dir + "/m.jsonl")) {
      if (rec.value("kind", "") == "run") at_two = rec.value("world_size", 0) == 2;
      if (at_two && rec.value("kind", "") == "epoch" && rec.value("epoch", 0) == 1) return true;
    }
    return false;
  };
  for (int i = 0; i < 1200 && !world_two_finished_epoch_one(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (!world_two_finished_epoch_one()) {
    ::kill(-back, SIGKILL);  // the parked agent would wait for ever
    FAIL() << read_text(dir + "/node0.log");
  }
  std::ofstream(go).close();  // node 1 comes back
  const int code = wait_for(n0, 300), code_back = wait_for(back, 60);
  if (code == -1) ::kill(-n0, SIGKILL);
  if (code_back == -1) ::kill(-back, SIGKILL);
  ASSERT_EQ(code, 0) << read_text(dir + "/node0.log");
  EXPECT_EQ(code_back, 0) << read_text(dir + "/node1_back.log");

  // The run that resumed at world 2: from which checkpoint, and when it started training.
  int64_t from_step = -1;
  double resumed_at = 0;
  bool grew = false, finished = false;
  for (const auto& rec : read_jsonl(dir + "/m.jsonl")) {
    if (rec.value("kind", "") == "run" && rec.value("resumed_from_world", 0) == 4 && from_step < 0) {
      EXPECT_EQ(rec.at("world_size").get<int>(), 2);
      from_step = rec.at("step").get<int64_t>();
      resumed_at = rec.at("unix_time").get<double>();
    }
    if (rec.value("kind", "") == "run" && rec.value("resumed_from_world", 0) == 2)
      grew = rec.value("world_size", 0) == 4;
    if (rec.value("kind", "") == "epoch" && rec.value("epoch", 0) == 4) finished = grew;
  }
  ASSERT_GE(from_step, 40) << "no run resumed at world 2 from the world-4 checkpoints: "
                           << read_text(dir + "/node0.log");
  EXPECT_TRUE(grew) << "the job did not grow back to world 4: " << read_text(dir + "/node0.log");
  EXPECT_TRUE(finished) << "the last epoch did not end at world 4";
  std::printf(
      "node 1 killed; node 0 training again at world 2 (from the checkpoint of step %lld) %.1f s later\n",
      static_cast<long long>(from_step), resumed_at - died);

  // Epoch 1: what world 4 trained up to the checkpoint, and what world 2 trained after it.
  char name[32];
  std::snprintf(name, sizeof(name), "/ck/step_%08lld", static_cast<long long>(from_step));
  const nlohmann::json meta = nlohmann::json::parse(read_text(dir + name + "/meta.json"));
  ASSERT_EQ(meta.at("epoch").get<int>(), 1) << "the kill must land in epoch 1";
  std::vector<std::string> files, ref_files;
  for (int n : {0, 1})
    for (int r = 0; r < 4; ++r)
      files.push_back(dir + "/trace" + std::to_string(n) + "/rank" + std::to_string(r) + ".txt");
  for (int r = 0; r < 4; ++r) ref_files.push_back(ref + "/trace/rank" + std::to_string(r) + ".txt");
  std::vector<int64_t> planned, covered;
  collect(ref_files, 4, 1, -1, planned);
  collect(files, 4, 1, meta.at("batches_done").get<int64_t>(), covered);
  const size_t before = covered.size();
  collect(files, 2, 1, -1, covered);
  std::sort(planned.begin(), planned.end());
  std::sort(covered.begin(), covered.end());
  std::vector<int64_t> extra, missing;
  std::set_difference(covered.begin(), covered.end(), planned.begin(), planned.end(),
                      std::back_inserter(extra));
  std::set_difference(planned.begin(), planned.end(), covered.begin(), covered.end(),
                      std::back_inserter(missing));
  std::printf(
      "epoch 1: %zu samples planned at world 4, %zu trained there before the checkpoint, %zu at world 2 "
      "after it; %zu missing, %zu repeated\n",
      planned.size(), before, covered.size() - before, missing.size(), extra.size());
  EXPECT_GT(before, 0u);
  EXPECT_TRUE(missing.empty());
  EXPECT_LT(extra.size(), 2u);
}

// Note [A torchrun job's restarts]: node 0 trains alone (world 2) with the flags' fresh start
// (no --resume_from auto); node 1 joins the healthy job, and torchrun restarts node 0's workers
// without counting a restart (TORCHELASTIC_RESTART_COUNT stays 0 on both nodes). The world-4
// group resumes world 2's newest checkpoint (before, it started afresh at step 0 and set the
// run's checkpoints aside) and finishes the job.
TEST_F(MultiNode, ANodeJoiningAHealthyTorchrunJobResumesItsNewestCheckpoint) {
  ProcResult version = run({python(), "-c", "import torch; print(torch.__version__)"}, {}, 60);
  if (version.output.rfind("1.", 0) == 0) GTEST_SKIP() << "elastic membership needs the LibTorch 2.x build";
  const std::string dir = fresh_dir("elastic_grow"), port = std::to_string(free_port());
  auto node = [&](int n, const std::string& go = "") {
    return agent(n, ns_[n], ifname_[n], port, "grow" + tag_,
                 train_args(dir, dir + "/trace" + std::to_string(n), false, "8"), go);
  };
  const std::string go = dir + "/node1.go";
  const pid_t n0 = spawn(node(0), dir + "/node0.log"), n1 = spawn(node(1, go), dir + "/node1.log");
  for (int i = 0; i < 1200 && !fs::exists(dir + "/ck/step_00000020"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (!fs::exists(dir + "/ck/step_00000020")) {
    ::kill(-n1, SIGKILL);  // the parked agent would wait for ever
    FAIL() << read_text(dir + "/node0.log");
  }
  std::ofstream(go).close();  // node 1 joins
  const int code = wait_for(n0, 300), code1 = wait_for(n1, 60);
  if (code == -1) ::kill(-n0, SIGKILL);
  if (code1 == -1) ::kill(-n1, SIGKILL);
  ASSERT_EQ(code, 0) << read_text(dir + "/node0.log");
  EXPECT_EQ(code1, 0) << read_text(dir + "/node1.log");
  std::vector<nlohmann::json> runs;
  for (const auto& rec : read_jsonl(dir + "/m.jsonl"))
    if (rec.value("kind", "") == "run") runs.push_back(rec);
  ASSERT_GE(runs.size(), 2u) << "the job did not grow: " << read_text(dir + "/node0.log");
  EXPECT_EQ(runs[0].value("world_size", 0), 2);
  EXPECT_EQ(runs[0].value("step", -1), 0);
  const nlohmann::json& grown = runs[1];
  EXPECT_EQ(grown.value("world_size", 0), 4) << grown;
  EXPECT_EQ(grown.value("resumed_from_world", 0), 2) << "the world-4 group started afresh: " << grown;
  EXPECT_GE(grown.value("step", 0), 20) << grown;
  EXPECT_FALSE(grown.contains("restart_count")) << "torchrun counted the change of nodes: " << grown;
  EXPECT_FALSE(fs::exists(dir + "/ck/.superseded")) << "world 2's checkpoints were set aside";
  EXPECT_NE(
      read_text(dir + "/node0.log").find("torchrun job 'grow" + tag_ + "' started again in this folder"),
      std::string::npos)
      << read_text(dir + "/node0.log");
}

// Note [An agent store outlives its attempts]: torchrun's shared rendezvous store (torch's
// default: no TORCH_DISABLE_SHARE_RDZV_TCP_STORE) serves every attempt of the job. Node 0's rank 0
// stalls after step 30 (its peers wait in the next collective); node 1's workers are killed there:
// its agent counts a restart, node 0's agent restarts its workers for the new round without
// counting one. The ranks of counts 0 and 1 meet under their agreed name (keyed by their counts
// they never met again, and ranks of one count read an earlier attempt's Gloo addresses), resume
// the newest checkpoint and finish.
TEST_F(MultiNode, TorchrunsSharedStoreRestartsAJobWhoseNodesCountApart) {
  ProcResult version = run({python(), "-c", "import torch; print(torch.__version__)"}, {}, 60);
  if (version.output.rfind("1.", 0) == 0) GTEST_SKIP() << "elastic membership needs the LibTorch 2.x build";
  const std::string dir = fresh_dir("elastic_shared"), port = std::to_string(free_port());
  const std::string stalled = dir + "/stalled";
  // Each worker writes its node's restart count before it becomes ddptrain.
  auto node = [&](int n) {
    std::vector<std::string> env;
    if (n == 0) env = {"DDPTRAIN_FAULT_STALL_AT_STEP=30@" + stalled};
    std::vector<std::string> worker = {"-c",
                                       "echo \"$TORCHELASTIC_RESTART_COUNT\" >> " + dir + "/counts" +
                                           std::to_string(n) + "; exec \"$0\" \"$@\"",
                                       binary()};
    for (const auto& a : train_args(dir, dir + "/trace" + std::to_string(n), true, "2")) worker.push_back(a);
    return agent(n, ns_[n], ifname_[n], port, "shared" + tag_, worker, "", env, "2", "/bin/sh");
  };
  const pid_t n0 = spawn(node(0), dir + "/node0.log"), n1 = spawn(node(1), dir + "/node1.log");
  for (int i = 0; i < 1200 && !fs::exists(stalled); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (!fs::exists(stalled)) {
    ::kill(-n0, SIGKILL);
    ::kill(-n1, SIGKILL);
    FAIL() << read_text(dir + "/node0.log") << read_text(dir + "/node1.log");
  }
  // Node 1's workers die; its agent lives.
  run({"/bin/sh", "-c",
       "for p in $(ip netns pids " + ns_[1] +
           "); do [ \"$(cat /proc/$p/comm)\" = ddptrain ] && kill -9 $p; done; true"},
      {}, 30);
  const int code = wait_for(n0, 300), code1 = wait_for(n1, 60);
  if (code == -1) ::kill(-n0, SIGKILL);
  if (code1 == -1) ::kill(-n1, SIGKILL);
  ASSERT_EQ(code, 0) << read_text(dir + "/node0.log") << read_text(dir + "/node1.log");
  EXPECT_EQ(code1, 0) << read_text(dir + "/node1.log");
  std::vector<nlohmann::json> runs;
  bool finished = false;
  for (const auto& rec : read_jsonl(dir + "/m.jsonl")) {
    if (rec.value("kind", "") == "run") runs.push_back(rec);
    if (rec.value("kind", "") == "epoch" && rec.value("epoch", 0) == 2) finished = runs.size() == 2;
  }
  ASSERT_EQ(runs.size(), 2u) << read_text(dir + "/node0.log");
  const nlohmann::json& again = runs[1];
  EXPECT_EQ(again.value("world_size", 0), 4) << again;
  EXPECT_GE(again.value("step", 0), 20) << "the restarted job did not resume: " << again;
  // Node 0 restarted without counting, node 1 counted its workers' deaths; the run record says
  // the job's restart.
  EXPECT_EQ(read_text(dir + "/counts0"), "0\n0\n0\n0\n");
  EXPECT_EQ(read_text(dir + "/counts1"), "0\n0\n1\n1\n");
  EXPECT_EQ(again.value("restart_count", 0), 1) << again;
  EXPECT_TRUE(finished) << "the last epoch did not end in the restarted job";
}
