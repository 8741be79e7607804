// Helpers shared by the end-to-end test files: a tiny training job, the launcher command line,
// the fingerprints ranks log, and file reading.
#pragma once

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "proc.h"

namespace ddptrain::e2e {

// A tiny synthetic job: 256 samples of 3x8x8, width 0.125: seconds per epoch. In fp32
// (--no-use_amp; later flags win): the tests compare separate fresh runs bitwise, and
// --amp_dtype auto's measured choice is not the test's subject there (see Note [Precision
// chosen by measurement]; E2E.AutoPrecisionIsMeasuredAndKeptByAResume tests it).
inline std::vector<std::string> tiny_train(const std::string& ckpt, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"train", "--dataset_size", "256",  "--image_size",   "8", "--width",
                                "0.125", "--batch_size",   "16",   "--num_workers",  "1", "--epochs",
                                "2",     "--lr",           "0.05", "--log_interval", "4", "--checkpoint_dir",
                                ckpt,    "--threads",      "1",    "--no-use_amp"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// GPT's debug preset on a text file every Debian machine has (base-files' GPL-3), fp32, one
// loader thread and one intra-op thread: seconds per epoch.
inline const char* kGplText = "/usr/share/common-licenses/GPL-3";
inline std::vector<std::string> gpt_text_train(const std::string& ckpt, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"train",
                                "--model",
                                "gpt",
                                "--gpt_preset",
                                "debug",
                                "--dataset",
                                "text",
                                "--data_path",
                                kGplText,
                                "--batch_size",
                                "8",
                                "--num_workers",
                                "1",
                                "--threads",
                                "1",
                                "--no-use_amp",
                                "--checkpoint_dir",
                                ckpt};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

inline std::vector<std::string> launch(int nproc, int port, const std::vector<std::string>& worker) {
  std::vector<std::string> a = {
      binary(), "launch", "--nproc_per_node", std::to_string(nproc), "--master_port", std::to_string(port)};
  a.insert(a.end(), worker.begin(), worker.end());
  return a;
}

// `launch` with the launcher's restart budget: a failed group is restarted up to
// max_restarts times.
inline std::vector<std::string> launch_restarting(int nproc, int port, int max_restarts,
                                                  const std::vector<std::string>& worker) {
  std::vector<std::string> a = launch(nproc, port, worker);
  a.insert(a.begin() + 2, {"--max_restarts", std::to_string(max_restarts)});
  return a;
}

// The environment of an injected fault (src/util/fault.h): rank `rank` does `what` ("KILL":
// SIGKILL, "THROW": an error) right after optimizer step `step`, in launch attempt `attempt`
// only (-1: in every attempt).
inline std::map<std::string, std::string> fault_at_step(const std::string& what, int step, int rank,
                                                        int attempt = 0) {
  return {{"DDPTRAIN_FAULT_" + what + "_AT_STEP", std::to_string(step)},
          {"DDPTRAIN_FAULT_RANK", std::to_string(rank)},
          {"DDPTRAIN_FAULT_ATTEMPT", std::to_string(attempt)}};
}

// The fingerprint each rank logs at the end, by launcher prefix ("[r] ...").
inline std::map<int, std::string> fingerprints(const std::string& out) {
  std::map<int, std::string> fp;
  for (const auto& l : lines_with(out, "parameter fingerprint: ")) {
    int rank = l[0] == '[' ? std::stoi(l.substr(1)) : 0;
    fp[rank] = l.substr(l.rfind(' ') + 1);
  }
  return fp;
}

// The loss of every step line, in order, printed on one line under `title`.
inline std::vector<double> step_losses(const std::string& out, const char* title) {
  std::vector<double> losses;
  for (const auto& l : lines_with(out, " | loss "))
    losses.push_back(std::stod(l.substr(l.find(" | loss ") + 8)));
  std::printf("%s:", title);
  for (double v : losses) std::printf(" %.4f", v);
  std::printf("\n");
  return losses;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Every record of a JSON-lines file (a metrics file), in order; none when it is missing.
inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

// `key` of every step record of a metrics file, in order.
inline std::vector<double> step_values(const std::string& metrics, const std::string& key) {
  std::vector<double> out;
  for (const auto& rec : read_jsonl(metrics))
    if (rec.value("kind", "") == "step") out.push_back(rec.at(key).get<double>());
  return out;
}

// One run's part of a --trace_samples_dir file: its world size (the "# run world W" line) and,
// per epoch and micro-batch, the sample indices.
struct TracedRun {
  int world = 0;
  std::map<int, std::map<int64_t, std::vector<int64_t>>> epochs;
};

// The runs of DIR/rank<r>.txt in order (none when the file is missing); lines before any
// "# run" header count as one run of unknown world (0).
inline std::vector<TracedRun> read_sample_trace(const std::string& path) {
  std::vector<TracedRun> runs;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    int world = 0, epoch = 0;
    long long micro = 0;
    if (std::sscanf(line.c_str(), "# run world %d", &world) == 1) {
      runs.push_back({world, {}});
      continue;
    }
    if (std::sscanf(line.c_str(), "epoch %d micro %lld:", &epoch, &micro) != 2) continue;
    if (runs.empty()) runs.emplace_back();
    std::istringstream ids(line.substr(line.find(':') + 1));
    auto& v = runs.back().epochs[epoch][micro];
    for (int64_t i; ids >> i;) v.push_back(i);
  }
  return runs;
}

// The sample indices of `epoch` over ranks 0..world-1 of a trace folder (DIR/rank<r>.txt), in
// micro-batches [0, before) (all when before < 0), sorted.
inline std::vector<int64_t> traced_samples(const std::string& trace, int world, int epoch,
                                           int64_t before = -1) {
  std::vector<int64_t> ids;
  for (int r = 0; r < world; ++r)
    for (const TracedRun& run : read_sample_trace(trace + "/rank" + std::to_string(r) + ".txt")) {
      if (!run.epochs.count(epoch)) continue;
      for (const auto& [micro, v] : run.epochs.at(epoch))
        if (before < 0 || micro < before) ids.insert(ids.end(), v.begin(), v.end());
    }
  std::sort(ids.begin(), ids.end());
  return ids;
}

// A run killed in epoch 2 after `cut_micro` micro-batches (its trace in cut, world 2) and
// resumed at world 3 (trace in three) against the uninterrupted run's plan (whole, world 2):
// every sample of epoch 2 trained, with no more repeats than PyTorch's padding at world 3.
inline void expect_epoch_two_trained_once(const std::string& whole, const std::string& cut,
                                          const std::string& three, int64_t cut_micro, const char* what) {
  std::vector<int64_t> covered = traced_samples(cut, 2, 2, cut_micro);
  const std::vector<int64_t> rest = traced_samples(three, 3, 2);
  // Both parts traced, and the plan too: empty traces would leave nothing missing.
  EXPECT_FALSE(covered.empty()) << what << ": the cut run traced nothing of epoch 2";
  EXPECT_FALSE(rest.empty()) << what << ": the resumed run traced nothing of epoch 2";
  covered.insert(covered.end(), rest.begin(), rest.end());
  std::sort(covered.begin(), covered.end());
  const std::vector<int64_t> planned = traced_samples(whole, 2, 2);
  EXPECT_GE(planned.size(), covered.size() > 2 ? covered.size() - 2 : 1)
      << what << ": the plan is not traced whole";
  std::vector<int64_t> missing;
  std::set_difference(planned.begin(), planned.end(), covered.begin(), covered.end(),
                      std::back_inserter(missing));
  EXPECT_TRUE(missing.empty()) << missing.size() << " " << what << " of epoch 2 never trained";
  EXPECT_LT(covered.size() - planned.size(), 3u) << "more repeats than PyTorch's padding at world 3";
}

// How many times needle occurs in text.
inline size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace ddptrain::e2e
