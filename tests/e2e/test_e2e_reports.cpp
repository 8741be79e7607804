// End-to-end tests of what a run reports: the real ddptrain binary, real processes, Gloo on
// loopback: the metrics file, TensorBoard and the plot, step rates without checkpoint saves,
// the progress bar on a terminal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "e2e_helpers.h"
#include "proc.h"

using namespace ddptrain::e2e;
namespace fs = std::filesystem;

TEST(E2E, MetricsFileTensorBoardAndPlot) {
  const std::string dir = fresh_dir("metrics");
  const std::string path = dir + "/run/metrics.jsonl";
  ProcResult r = run(launch(2, free_port(),
                            tiny_train(dir, {"--epochs", "2", "--metrics_file", path, "--tensorboard_dir",
                                             dir + "/tb", "--grad_scaler", "on", "--clip_grad_norm", "5"})),
                     {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(lines_with(r.output, "peak for MFU: CPU peak measured at start-up on 1 threads").empty())
      << r.output;
  EXPECT_FALSE(lines_with(r.output, "% | peak mem ").empty()) << "no MFU in the step line: " << r.output;
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  int steps = 0, epochs = 0, runs = 0;
  int64_t last_step = 0;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);  // every line is one JSON record
    const std::string kind = j.at("kind");
    for (const char* k : {"step", "epoch", "time_s"}) EXPECT_TRUE(j.contains(k)) << k << " missing: " << line;
    EXPECT_GE(j.at("step").get<int64_t>(), last_step);
    last_step = j.at("step").get<int64_t>();
    if (kind == "step") {
      ++steps;
      for (const char* k :
           {"loss", "lr", "samples_per_s", "ms_per_step", "mfu", "comm_wait_ms", "peak_mem_mib", "data_ms",
            "fwd_ms", "bwd_ms", "opt_ms", "end_ms", "data_wait_share", "loss_scale", "grad_norm",
            "allreduces_per_step", "allreduce_mib_per_step"})
        EXPECT_TRUE(j.contains(k)) << k << " missing: " << line;
      EXPECT_GT(j.at("mfu").get<double>(), 0.0) << line;
      EXPECT_LT(j.at("mfu").get<double>(), 1.0) << line;
      EXPECT_GT(j.at("samples_per_s").get<double>(), 0.0) << line;
    } else if (kind == "run") {  // the start of the run: the precision chosen and why
      ++runs;
      EXPECT_EQ(j.at("precision"), "fp32") << line;
      EXPECT_NE(j.at("precision_why").get<std::string>().find("use_amp=false"), std::string::npos) << line;
      EXPECT_EQ(j.at("world_size"), 2) << line;
      // --bucket_cap_mb auto measured the link; a gradient this small fits any candidate cap,
      // so the largest (fewest collectives) is chosen.
      EXPECT_EQ(j.at("bucket_cap_mb"), 25.0) << line;
      EXPECT_GT(j.at("unix_time").get<double>(), 1.7e9) << line;
    } else {
      ASSERT_EQ(kind, "epoch") << line;
      ++epochs;
      for (const char* k :
           {"train_loss", "train_acc", "epoch_s", "peak_mem_mib_per_rank", "peak_rss_mib_per_rank"})
        EXPECT_TRUE(j.contains(k)) << k << " missing: " << line;
      EXPECT_EQ(j.at("peak_mem_mib_per_rank").size(), 2u) << line;
      ASSERT_EQ(j.at("peak_rss_mib_per_rank").size(), 2u) << line;
      for (double rss : j.at("peak_rss_mib_per_rank"))  // a LibTorch process holds more than its tensors
        EXPECT_GT(rss, j.at("peak_mem_mib_per_rank")[0].get<double>()) << line;
    }
  }
  EXPECT_EQ(epochs, 2);
  EXPECT_EQ(runs, 1);
  EXPECT_FALSE(lines_with(r.output, "bucket_cap_mb=auto: all-reduce latency").empty()) << r.output;
  EXPECT_EQ(steps, 2 * 2);  // 8 steps per epoch, a line every 4
  EXPECT_EQ(last_step, 16);

  // TensorBoard's own reader (PyPI tensorboard, kept apart from torch's numpy) finds the
  // same numbers in the event file.
  ProcResult tb =
      run({"/usr/bin/python3", "-s", source_dir() + "/tests/python/read_tensorboard.py", dir + "/tb", path},
          {{"PYTHONPATH", source_dir() + "/.pydeps-tb"}}, 120);
  EXPECT_EQ(tb.exit_code, 0) << tb.output;
  EXPECT_NE(tb.output.find("TB OK"), std::string::npos) << tb.output;

  // The plot: a well-formed SVG with the four panels, one run and two overlaid.
  ProcResult p1 = run({binary(), "plot", path, "--out=" + dir + "/run.svg"}, {}, 60);  // as -o FILE
  ASSERT_EQ(p1.exit_code, 0) << p1.output;
  const std::string svg = read_text(dir + "/run.svg");
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  for (const char* title : {">loss<", ">accuracy<", ">samples/s (global)<", ">MFU (%)<"})
    EXPECT_NE(svg.find(title), std::string::npos) << title;
  fs::copy_file(path, dir + "/other.jsonl");
  ProcResult p2 = run({binary(), "plot", path, dir + "/other.jsonl", "-o", dir + "/cmp.svg"}, {}, 60);
  ASSERT_EQ(p2.exit_code, 0) << p2.output;
  const std::string cmp = read_text(dir + "/cmp.svg");
  EXPECT_EQ(count_of(cmp, "<polyline"), 2u * 4u)
      << "2 runs x (train loss, train accuracy, samples/s, MFU); synthetic data has no test split";
  EXPECT_NE(cmp.find("other train"), std::string::npos) << "no legend per run";
  ProcResult xml =
      run({python(), "-c", "import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1]); print('XML OK')",
           dir + "/cmp.svg"},
          {}, 60);
  EXPECT_NE(xml.output.find("XML OK"), std::string::npos) << xml.output;
  EXPECT_EQ(run({binary(), "plot", dir + "/missing.jsonl", "-o", dir + "/x.svg"}, {}, 60).exit_code, 2);
  // Two files of one name in two folders are told apart by their folder; the output's folder
  // is created; another format than SVG and a file without records are usage errors.
  fs::create_directories(dir + "/a");
  fs::create_directories(dir + "/b");
  fs::copy_file(path, dir + "/a/m.jsonl");
  fs::copy_file(path, dir + "/b/m.jsonl");
  ProcResult p3 =
      run({binary(), "plot", dir + "/a/m.jsonl", dir + "/b/m.jsonl", "-o", dir + "/new/sub/ab.svg"}, {}, 60);
  ASSERT_EQ(p3.exit_code, 0) << p3.output;
  const std::string ab = read_text(dir + "/new/sub/ab.svg");
  EXPECT_NE(ab.find("a/m train"), std::string::npos) << "runs of a/m.jsonl and b/m.jsonl look alike";
  EXPECT_NE(ab.find("b/m train"), std::string::npos) << "runs of a/m.jsonl and b/m.jsonl look alike";
  EXPECT_EQ(run({binary(), "plot", path, "-o", dir + "/x.png"}, {}, 60).exit_code, 2);
  EXPECT_FALSE(fs::exists(dir + "/x.png"));
  { std::ofstream(dir + "/empty.jsonl"); }
  EXPECT_EQ(run({binary(), "plot", dir + "/empty.jsonl", "-o", dir + "/e.svg"}, {}, 60).exit_code, 2);
  EXPECT_FALSE(fs::exists(dir + "/e.svg"));
  // A line a killed run cut short is left out (and said); the records around it are drawn.
  std::ofstream(dir + "/cut.jsonl") << read_text(path) << "{\"kind\": \"st\n" << read_text(path);
  ProcResult cut = run({binary(), "plot", dir + "/cut.jsonl", "-o", dir + "/cut.svg"}, {}, 60);
  EXPECT_EQ(cut.exit_code, 0) << cut.output;
  EXPECT_TRUE(fs::exists(dir + "/cut.svg"));
  EXPECT_NE(cut.output.find("left out 1 line of"), std::string::npos) << cut.output;
  // JSON that is not a metrics record (was exit 1 with the JSON library's type error).
  for (const char* text : {"[1, 2]\n", "{\"kind\": \"step\", \"step\": \"ten\"}\n", "{\"run\": 3}\n"}) {
    std::ofstream(dir + "/other.jsonl") << text;
    ProcResult o = run({binary(), "plot", dir + "/other.jsonl", "-o", dir + "/o.svg"}, {}, 60);
    EXPECT_EQ(o.exit_code, 2) << text << o.output;
    EXPECT_FALSE(fs::exists(dir + "/o.svg"));
  }
}

// A step checkpoint's time is not the steps': the save after step 2, slowed by 3 s
// (DDPTRAIN_FAULT_SLOW_SAVE), is the next step record's checkpoint_s, and its ms_per_step is
// the steps' alone (samples_per_s is computed from the same time). They held the save: the interval's rates
// read a fraction. A save that takes more than half of the launcher's grace before SIGKILL (here
// ddptrain launch's 4 s) is said, once: a stop's save would be cut short.
TEST(E2E, AStepCheckpointsTimeIsNotChargedToTheStepRates) {
  const std::string dir = fresh_dir("step_save_time");
  std::vector<std::string> argv =
      tiny_train(dir, {"--max_steps", "6", "--log_interval", "2", "--save_every_steps", "2", "--metrics_file",
                       dir + "/m.jsonl"});
  argv.insert(argv.begin(), binary());
  ProcResult r = run(argv,
                     {{"DDPTRAIN_FAULT_SLOW_SAVE", "3@2"},
                      {"RANK", "0"},
                      {"WORLD_SIZE", "1"},
                      {"DDPTRAIN_STOP_GRACE_S", "4"}},
                     300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(lines_with(r.output, "and the launcher gives a stop 4 s to save before SIGKILL").size(), 1u)
      << r.output;
  std::map<int64_t, nlohmann::json> steps;
  for (const auto& rec : read_jsonl(dir + "/m.jsonl"))
    if (rec.value("kind", "") == "step") steps[rec.at("step").get<int64_t>()] = rec;
  ASSERT_TRUE(steps.count(2) && steps.count(4) && steps.count(6)) << r.output;
  EXPECT_FALSE(steps[2].contains("checkpoint_s"));
  ASSERT_TRUE(steps[4].contains("checkpoint_s")) << steps[4].dump();
  EXPECT_GE(steps[4].at("checkpoint_s").get<double>(), 3.0);
  // The save charged to the steps read 1500 ms a step or more; the steps alone take a few ms
  // (a ratio to steps 5-6 failed on a pause of the machine's, not of the code).
  EXPECT_LT(steps[4].at("ms_per_step").get<double>(), 1000.0) << steps[4].dump();
}

TEST(E2E, ProgressBarOnATerminalPlainStepLinesOtherwise) {
  const std::string dir = fresh_dir("progress");
  const std::string cmd = binary() +
                          " train --dataset_size 256 --image_size 8 --width 0.125 --batch_size 16 "
                          "--num_workers 1 --epochs 1 --threads 1 --log_interval 4 --checkpoint_dir " +
                          dir;
  // `script` runs the command on a pseudo-terminal, as a user's shell would.
  ProcResult tty = run({"script", "-qfec", cmd + " --metrics_file " + dir + "/m.jsonl", "/dev/null"},
                       {{"TERM", "xterm"}}, 120);
  ASSERT_EQ(tty.exit_code, 0) << tty.output;
  const size_t last = tty.output.find("\r\033[Kepoch 1 [##############################] 16/16  ETA 0:00");
  ASSERT_NE(last, std::string::npos) << tty.output;
  // Its loss is the last step line's (world 1: the mean of the last 4 steps), not step 16's alone.
  const size_t at = tty.output.find("| loss ", last);
  ASSERT_NE(at, std::string::npos) << tty.output;
  double step16 = -1;
  for (const auto& r : read_jsonl(dir + "/m.jsonl"))
    if (r.value("kind", "") == "step" && r.value("step", 0) == 16) step16 = r.at("loss").get<double>();
  char want[32];
  std::snprintf(want, sizeof want, "%.4f", step16);
  EXPECT_EQ(tty.output.substr(at + 7, std::strlen(want)), want) << tty.output;
  EXPECT_TRUE(lines_with(tty.output, "ms/step").empty()) << "step lines on a terminal: " << tty.output;
  EXPECT_FALSE(lines_with(tty.output, "epoch 1 done").empty()) << tty.output;
  ProcResult plain = run({"/bin/sh", "-c", cmd}, {}, 120);  // output to a pipe
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(plain.output.find("ETA"), std::string::npos) << plain.output;
  EXPECT_EQ(lines_with(plain.output, "ms/step").size(), 4u) << plain.output;
}

// A loss that diverged (NaN) is written as null, as JSON has no NaN: the plot leaves it out and
// says so, naming the first (before, it was left out silently).
TEST(E2E, PlotSaysItLeftOutAValueWrittenAsNull) {
  const std::string dir = fresh_dir("plot_null");
  {
    std::ofstream m(dir + "/m.jsonl");
    m << "{\"kind\": \"run\", \"run\": \"a\", \"step\": 0}\n";
    for (int s : {4, 8, 12, 16})
      m << "{\"kind\": \"step\", \"run\": \"a\", \"step\": " << s
        << ", \"loss\": " << (s >= 12 ? "null" : "2") << "}\n";
  }
  ProcResult p = run({binary(), "plot", dir + "/m.jsonl", "-o", dir + "/m.svg"}, {}, 60);
  EXPECT_EQ(p.exit_code, 0) << p.output;
  EXPECT_NE(p.output.find("left out 2 values that are null (a NaN or an infinity"), std::string::npos)
      << p.output;
  EXPECT_NE(p.output.find("the first the loss at step 12"), std::string::npos) << p.output;
}
