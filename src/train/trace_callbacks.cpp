#include "train/trace_callbacks.h"

#include <filesystem>

#include "util/error.h"

namespace ddptrain {

SampleTrace::SampleTrace(const std::string& dir, int rank, int world) {
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/rank" + std::to_string(rank) + ".txt";
  out_.open(path, std::ios::app);
  DDP_CHECK(out_.good(), "cannot open the sample trace file '", path, "'");
  out_ << "# run world " << world << '\n' << std::flush;  // a restarted job appends: its runs stay apart
}

void SampleTrace::on_micro_batch(const TrainState& s, const MicroBatchEvent& e) {
  out_ << "epoch " << s.epoch << " micro " << e.micro << ":";
  for (int64_t i : e.indices) out_ << ' ' << i;
  out_ << '\n' << std::flush;
}

Profiler::Profiler(const std::string& checkpoint_dir, const DistContext& ctx)
    : ctx_(ctx),
      path_(checkpoint_dir + "/trace_rank" + std::to_string(ctx.rank()) + ".json"),
      trace_(path_, ctx.rank()) {}

void Profiler::on_phase(const TrainState&, const PhaseEvent& e) {
  trace_.add(e.name, e.start, e.end, e.run_step);
}

void Profiler::on_step_end(const TrainState& s, const StepEvent&) {
  if (trace_.maybe_write(s.run_steps - 1))
    ctx_.log().info("profiler trace (Chrome trace format; open in Perfetto or chrome://tracing): " + path_);
}

}  // namespace ddptrain
