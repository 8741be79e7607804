// MiniResNet: parameter count, state_dict keys in Python's order, and initial weights equal
// to Python's after manual_seed(42) (digests in tests/golden/model_seed42.txt).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "golden.h"
#include "models/mini_resnet.h"
#include "obs/metrics.h"
#include "obs/mfu.h"
#include "obs/tensorboard.h"
#include "serialize/python_pickle.h"
#include "util/error.h"
#include "util/strings.h"

using namespace ddptrain;

TEST(Model, DefaultParameterCount) {
  MiniResNet m(MiniResNetOptions{});
  EXPECT_EQ(count_parameters(*m), 2777674);
}

TEST(Model, ForwardShape) {
  MiniResNet m(MiniResNetOptions{1, 10, 0.25});
  auto y = m->forward(torch::randn({2, 1, 28, 28}));
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 10}));
}

TEST(Model, InitialWeightsAndKeysEqualPython) {
  auto lines = testing_golden::read_lines("model_seed42.txt");
  ASSERT_FALSE(lines.empty()) << "golden file missing";
  size_t li = 0;
  for (double width : {1.0, 0.25}) {
    torch::manual_seed(42);
    MiniResNet m(MiniResNetOptions{3, 10, width});
    NamedTensors sd = state_dict(*m);
    for (const auto& [key, t] : sd) {
      ASSERT_LT(li, lines.size());
      std::istringstream in(lines[li++]);
      double w;
      std::string gkey, shape;
      std::vector<double> d(4);
      in >> w >> gkey >> shape >> d[0] >> d[1] >> d[2] >> d[3];
      ASSERT_EQ(w, width);
      ASSERT_EQ(key, gkey) << "state_dict key order differs from Python";
      auto mine = testing_golden::digest(t);
      for (int k = 0; k < 4; ++k) {
        double tol = k < 2 ? 1e-9 * (1.0 + std::abs(d[static_cast<size_t>(k)])) : 0.0;
        EXPECT_NEAR(mine[static_cast<size_t>(k)], d[static_cast<size_t>(k)], tol) << key << " digest " << k;
      }
    }
  }
  EXPECT_EQ(li, lines.size()) << "Python has more state_dict entries";
}

TEST(Model, FlopsPerSampleMatchAHandCount) {
  // width 0.125 (channels 8, 16, 32), 3x8x8 input, 10 classes; 2 x MACs per conv/linear.
  MiniResNet m(MiniResNetOptions{3, 10, 0.125});
  const int64_t stem = 2 * 3 * 8 * 9 * 64;  // 8x8 out
  const int64_t c8 = 2 * 8 * 8 * 9 * 64;    // 8->8 3x3, 8x8 out
  const int64_t down1 =
      2 * 8 * 16 * 9 * 16 + 2 * 16 * 16 * 9 * 16 + 2 * 8 * 16 * 16;  // conv1/s2, conv2, 1x1 shortcut
  const int64_t c16 = 2 * 16 * 16 * 9 * 16;
  const int64_t down2 = 2 * 16 * 32 * 9 * 4 + 2 * 32 * 32 * 9 * 4 + 2 * 16 * 32 * 4;
  const int64_t c32 = 2 * 32 * 32 * 9 * 4;
  const int64_t fc = 2 * 32 * 10;
  const int64_t forward = stem + 4 * c8 + down1 + 2 * c16 + down2 + 2 * c32 + fc;
  EXPECT_EQ(forward, 847488);
  EXPECT_EQ(m->train_flops_per_sample(8, 8), 3 * forward);
  const auto table = m->layer_table(8, 8);
  ASSERT_EQ(table.size(), 1u + 12u + 2u + 1u);  // stem, 6 x 2 convs, 2 shortcuts, fc
  EXPECT_EQ(table.front().name, "stem.0");
  EXPECT_EQ(table.back().out_shape, (std::vector<int64_t>{10}));
  int64_t params = 0;
  for (const auto& r : table) params += r.params;
  EXPECT_EQ(params + 2 * (8 + 8 * 4 + 16 * 5 + 32 * 5), count_parameters(*m));  // + BatchNorm weight and bias
}

TEST(Model, MfuFormula) {
  EXPECT_DOUBLE_EQ(mfu(1e9, 100.0, 1e12, 2), 0.05);  // 1e11 FLOP/s of 2 x 1e12
  EXPECT_DOUBLE_EQ(mfu(1e9, 100.0, 0.0, 2), 0.0);    // unknown peak
  constexpr GpuPeakKind k16 = GpuPeakKind::kHalf, tf32 = GpuPeakKind::kTf32, fp32 = GpuPeakKind::kFp32;
  EXPECT_DOUBLE_EQ(known_gpu_peak_tflops("NVIDIA H200", k16), 989.0);
  EXPECT_DOUBLE_EQ(known_gpu_peak_tflops("NVIDIA H100 80GB HBM3", k16), 989.0);
  EXPECT_DOUBLE_EQ(known_gpu_peak_tflops("NVIDIA H100 PCIe", k16), 756.0);  // not the SXM part's
  EXPECT_DOUBLE_EQ(known_gpu_peak_tflops("NVIDIA H200 NVL", tf32), 417.5);
  EXPECT_DOUBLE_EQ(known_gpu_peak_tflops("NVIDIA A100-SXM4-80GB", k16), 312.0);
  // fp32 matmuls without TF32 (PyTorch's default) run on the CUDA cores: a seventh of TF32's.
  EXPECT_DOUBLE_EQ(known_gpu_peak_tflops("NVIDIA H100 80GB HBM3", fp32), 67.0);
  EXPECT_DOUBLE_EQ(known_gpu_peak_tflops("NVIDIA A100-SXM4-80GB", fp32), 19.5);
  EXPECT_DOUBLE_EQ(known_gpu_peak_tflops("Some GPU", k16), 0.0);
  // Which peak: 16-bit under autocast; in fp32 the main kernels' (a convolutional model's
  // cuDNN convolutions take TF32 by default, where matmuls are IEEE fp32 without --tf32: its MFU
  // read above 100% against the fp32 peak).
  EXPECT_EQ(gpu_peak_kind(true, false, true, true), k16);
  EXPECT_EQ(gpu_peak_kind(false, false, true, true), tf32);
  EXPECT_EQ(gpu_peak_kind(false, false, false, true), fp32);
  EXPECT_EQ(gpu_peak_kind(false, false, true, false), fp32);
  EXPECT_EQ(gpu_peak_kind(false, true, true, false), tf32);
  EXPECT_DOUBLE_EQ(known_gpu_peak_tflops("Tesla V100-PCIE-32GB", k16), 112.0);  // not the SXM2 part's
  // A MIG instance: its share of the part's SMs (a 1g slice of an A100 has 14 of 108); without
  // its SM count, none (it read the whole part's peak: MFU 7x too low).
  EXPECT_DOUBLE_EQ(known_gpu_peak_tflops("NVIDIA A100-SXM4-40GB MIG 1g.10gb", k16, 14), 312.0 * 14 / 108);
  EXPECT_DOUBLE_EQ(known_gpu_peak_tflops("NVIDIA H100 80GB HBM3 MIG 3g.40gb", k16, 60), 989.0 * 60 / 132);
  EXPECT_DOUBLE_EQ(known_gpu_peak_tflops("NVIDIA A100-SXM4-40GB MIG 1g.10gb", k16), 0.0);
  // Whole words only: an A1000 is no A100, an A10G no A10 (both unknown: peak_tflops says theirs).
  EXPECT_DOUBLE_EQ(known_gpu_peak_tflops("NVIDIA RTX A1000 6GB Laptop GPU", k16), 0.0);
  EXPECT_DOUBLE_EQ(known_gpu_peak_tflops("NVIDIA A10G", k16), 0.0);
  EXPECT_DOUBLE_EQ(known_gpu_peak_tflops("NVIDIA A10", k16), 125.0);
  EXPECT_DOUBLE_EQ(known_gpu_peak_tflops("Tesla V100-SXM2-16GB", k16), 125.0);
  EXPECT_DOUBLE_EQ(known_gpu_peak_tflops("Tesla V100S-PCIE-32GB", k16), 130.0);
  EXPECT_DOUBLE_EQ(known_gpu_peak_tflops("NVIDIA GH200 480GB", k16), 989.0);
}

// A metrics file whose last line a killed run cut short: the next run's first record starts a
// line of its own (appended to the cut one it made both unreadable).
TEST(Metrics, ARecordAfterACutLineStartsALineOfItsOwn) {
  const std::string path = std::filesystem::temp_directory_path() /
                           ("ddptrain_metrics_cut_" + std::to_string(::getpid()) + ".jsonl");
  std::ofstream(path) << "{\"kind\": \"step\", \"step\": 1}\n{\"kind\": \"st";
  MetricsWriter(path, true).write("run", 1, 1, nlohmann::json::object());
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(nlohmann::json::parse(lines[2]).at("kind"), "run");
  std::filesystem::remove(path);
}

// An output that cannot be written is a usage error (exit 2) naming the path and the reason (a
// file-system exception ended the run with exit 1); a record holding bytes that are not UTF-8
// is written (nlohmann's dump threw).
TEST(Metrics, AnOutputThatCannotBeWrittenIsAUsageErrorNamingIt) {
  const auto refused = [](const std::function<void()>& open, const std::string& what) {
    try {
      open();
      ADD_FAILURE() << what << " opened";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refused([] { MetricsWriter("/proc/ddptrain_nope/m.jsonl", true); },
          "cannot create the folder of '/proc/ddptrain_nope/m.jsonl'");
  refused([] { TensorBoardWriter("/proc/ddptrain_nope/tb", true); },
          "cannot create the TensorBoard folder '/proc/ddptrain_nope/tb'");
  const std::string path = std::filesystem::temp_directory_path() /
                           ("ddptrain_metrics_latin1_" + std::to_string(::getpid()) + ".jsonl");
  MetricsWriter(path, true).write("eval", 1, 1, {{"checkpoint", std::string("ck-\xe9")}});
  std::ifstream in(path);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(nlohmann::json::parse(line).at("checkpoint").get<std::string>(), "ck-\xef\xbf\xbd");
  std::filesystem::remove(path);
}

// The event file's name holds the process id (SummaryWriter's too): two jobs writing into one
// folder in the same second shared one file.
TEST(TensorBoard, TheEventFileIsNamedWithItsProcess) {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("ddptrain_tb_" + std::to_string(::getpid()));
  const TensorBoardWriter tb(dir, true);
  EXPECT_TRUE(ends_with(tb.path(), "." + std::to_string(::getpid()))) << tb.path();
  std::filesystem::remove_all(dir);
}

TEST(TensorBoard, Crc32cKnownValues) {
  // RFC 3720 test vector: 32 bytes of zeros -> 0x8A9136AA; "123456789" -> 0xE3069283.
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}
