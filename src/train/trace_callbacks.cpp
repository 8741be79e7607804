#include "train/trace_callbacks.h"

#include <filesystem>

#include "util/error.h"
#include "util/files.h"

namespace ddptrain {

SampleTrace::SampleTrace(const std::string& dir, int rank, int world) {
  create_output_folder(dir, "the sample trace folder");
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

Profiler::Profiler(const std::string& checkpoint_dir, const DistContext& ctx, TraceSchedule schedule)
    : ctx_(ctx),
      path_(checkpoint_dir + "/trace_rank" + std::to_string(ctx.rank()) + ".json"),
      kernels_path_(checkpoint_dir + "/kernels_rank" + std::to_string(ctx.rank()) + ".json"),
      trace_(path_, ctx.rank(), schedule) {
  // Before the first checkpoint (a library program's folder may not exist yet): the traces are
  // written a few steps in.
  create_parent_folder(path_);
}

void Profiler::on_phase(const TrainState&, const PhaseEvent& e) {
  trace_.add(e.name, e.start, e.end, e.run_step);
}

void Profiler::on_step_end(const TrainState& s, const StepEvent& e) {
  const int64_t step = s.run_steps - 1;  // the step that ended; LibTorch's profiler spans the recorded ones
  // LibTorch's profiler starts as the step before the window ends; where that step ends an
  // epoch, as the next epoch begins (it would record the epoch's save and evaluation).
  const bool epoch_ends = e.step_in_epoch == e.epoch.steps_per_epoch;
  if (!epoch_ends && !trace_.recording(step) && trace_.recording(step + 1)) start_kernels();
  if (trace_.maybe_write(step))
    ctx_.log().info("profiler trace (Chrome trace format; open in Perfetto or chrome://tracing): " + path_);
  if (kernels_.active() && !trace_.recording(step + 1)) write_kernels();
  if (e.stopping) cut_short(s, "the run ends");
}

void Profiler::on_epoch_begin(const TrainState& s, const EpochPosition&) {
  if (trace_.recording(s.run_steps) && !trace_.pending()) start_kernels();  // the window's first step
}

// The profiler would otherwise run on through the epoch's checkpoint and evaluation.
void Profiler::on_epoch_trained(const TrainState& s) { cut_short(s, "its epoch ends"); }

void Profiler::start_kernels() {
  if (kernels_.active()) return;
  std::string why;
  if (!kernels_.start(ctx_.device().is_cuda(), &why))
    ctx_.log().warn("no kernel trace: LibTorch's profiler did not start (" + why + ")");
}

void Profiler::write_trace() {
  if (trace_.write())
    ctx_.log().info("profiler trace (Chrome trace format; open in Perfetto or chrome://tracing): " + path_);
}

void Profiler::write_kernels() {
  std::string why;
  if (kernels_.stop_and_save(kernels_path_, &why))
    ctx_.log().info("kernel trace (LibTorch's profiler; scripts/profile_table.py summarises it): " +
                    kernels_path_);
  else
    ctx_.log().warn("no kernel trace: LibTorch's profiler could not write it (" + why + ")");
}

void Profiler::cut_short(const TrainState& s, const char* where) {
  // Nothing recorded yet: the window has not begun (LibTorch's profiler, if it started at the
  // step before, is dropped with the Profiler: a run that ends here writes no trace).
  if (!trace_.pending()) return;
  const TraceSchedule& w = trace_.schedule();
  const int64_t first = int64_t{w.wait} + w.warmup + 1;
  ctx_.log().warn(str("the profile window (steps ", first, " to ", first + w.active - 1,
                      " of this run) is cut short: ", where, " after step ", s.run_steps,
                      "; the traces hold the steps recorded so far"));
  write_trace();
  if (kernels_.active()) write_kernels();
}

}  // namespace ddptrain
