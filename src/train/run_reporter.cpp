#include "train/run_reporter.h"

#include <algorithm>
#include <cmath>

#include "ddp/fully_sharded.h"
#include "ddp/zero_optimizer.h"
#include "obs/memory.h"
#include "train/deterministic.h"
#include "train/optimizer.h"
#include "train/step_report.h"
#include "train/trainable.h"

namespace ddptrain {
namespace {

double mib_of(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// What this rank holds of the training state (Note [ZeRO stage 1]).
void state_memory(const TrainState& s, const DistributedDataParallel& ddp, StepReport& r) {
  int64_t params = 0, optim = 0;
  if (s.fsdp) {
    params = s.fsdp->held_bytes();
    r.param_peak_mib = mib_of(s.fsdp->peak_held_bytes());
  } else {
    for (const auto& p : unique_parameters(s.module)) params += static_cast<int64_t>(p.nbytes());
  }
  if (s.sharded) {
    optim = s.sharded->state_bytes();
  } else {
    for (const auto& t : optimizer_state_tensors(s.optimizer))
      if (t.defined()) optim += static_cast<int64_t>(t.nbytes());
  }
  r.param_mib = mib_of(params);
  r.grad_mib = mib_of(ddp.bucket_bytes() + s.grad_bytes);
  r.optim_mib = mib_of(optim);
}

}  // namespace

std::string epoch_part(int epoch, int64_t first_micro, int64_t micro_done, int64_t batches) {
  return str("micro-batches ", first_micro + 1, "-", micro_done, " of ", batches, " of epoch ", epoch);
}

RunReporter::RunReporter(const DistContext& ctx, const TrainerOptions& opts, DistributedDataParallel& ddp,
                         StepTimer& timer, RunFacts facts, const TrainState& state)
    : ctx_(ctx),
      opts_(opts),
      ddp_(ddp),
      timer_(timer),
      facts_(std::move(facts)),
      metrics_(opts.report.metrics_file, ctx.is_main()),
      progress_(ctx.is_main()),
      tensorboard_(opts.report.tensorboard_dir, ctx.is_main()),
      interval_loss_(at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(ctx.device()))) {
  const Precision& p = facts_.precision;
  nlohmann::json run = {{"precision", p.name()},
                        {"precision_why", p.why},
                        {"world_size", ctx.world_size()},
                        {"backend", ctx.backend_name()},
                        {"threads_per_rank", facts_.threads_per_rank},
                        {"batch_size", opts.data.batch_size},
                        {"grad_accum_steps", opts.loop.grad_accum_steps},
                        {"buckets", ddp.num_buckets()},
                        {"bucket_cap_mb", static_cast<double>(ddp.bucket_cap_bytes()) / (1 << 20)},
                        {"peak_flops_per_s", facts_.peak.flops_per_s},
                        {"peak_source", facts_.peak.source},
                        {"deterministic_algorithms", deterministic_algorithms()},
                        {"tf32_matmuls", at::globalContext().allowTF32CuBLAS()}};
  if (state.resumed_from_world > 0) {  // Note [Resume at another world size]
    run["resumed_from_world"] = state.resumed_from_world;
    run["samples_left_in_epoch"] = state.samples_left_in_epoch;
  }
  // Building, loading and sharding the model (rank 0; Note [Units sharded as built]).
  if (facts_.loaded_peak_bytes >= 0)
    run["load_peak_mem_mib"] = static_cast<double>(facts_.loaded_peak_bytes) / (1 << 20);
  if (facts_.loaded_peak_rss_bytes >= 0)
    run["load_peak_rss_mib"] = static_cast<double>(facts_.loaded_peak_rss_bytes) / (1 << 20);
  run["lr_schedule"] = state.lr_horizon.to_json();  // Note [Schedule horizon]
  if (state.lr_change) run["lr_schedule_change"] = state.lr_change->to_json();
  // A launcher's restart (TORCHELASTIC_RESTART_COUNT on any rank: the nodes' agents count apart),
  // or torchrun's start of the job again (uncounted on every node): its steps replace the earlier
  // attempt's, whether it resumed a checkpoint or, the attempt having saved none, started afresh.
  if (facts_.restart_count > 0) run["restart_count"] = facts_.restart_count;
  metrics_.write("run", state.global_step, state.epoch, std::move(run));
  if (state.global_step > 0 || facts_.restart_count > 0 || facts_.same_torchrun_job)
    tensorboard_.session_start(state.global_step + 1);  // a resume or a restart: its steps replace
}

void RunReporter::on_epoch_begin(const TrainState& s, const EpochPosition&) {
  interval_loss_.zero_();
  interval_micro_ = 0;
  interval_samples_ = 0;
  interval_steps_ = 0;
  interval_t0_ = Clock::now();
  save_s_at_t0_ = s.step_save_s;
  epoch_samples_ = 0;
}

void RunReporter::on_micro_batch(const TrainState&, const MicroBatchEvent& e) {
  interval_loss_.add_(e.loss);
  ++interval_micro_;
  interval_samples_ += static_cast<int64_t>(e.indices.size());
  epoch_samples_ += static_cast<int64_t>(e.indices.size());
}

void RunReporter::on_step_end(const TrainState& s, const StepEvent& e) {
  ++interval_steps_;
  // A terminal only, and only when the bar redraws (at most 10 times a second): it reads the loss.
  if (progress_.due(e.step_in_epoch, e.epoch.steps_per_epoch)) update_progress(s, e);
  if (e.step_in_epoch % opts_.report.log_interval == 0 || e.step_in_epoch == e.epoch.steps_per_epoch ||
      e.stopping)
    report_interval(s, e);
}

void RunReporter::update_progress(const TrainState& s, const StepEvent& e) {
  const EpochPosition& p = e.epoch;
  const double elapsed = seconds_since(p.started);
  const int64_t done_here = e.step_in_epoch - p.first_micro / opts_.loop.grad_accum_steps;
  // This rank's samples as trained (an epoch's short last batch counts short) times the ranks:
  // no collective at a redraw.
  const double samples_per_s = static_cast<double>(epoch_samples_) * ctx_.world_size() / elapsed;
  const double eta = done_here > 0 ? elapsed / static_cast<double>(done_here) *
                                         static_cast<double>(p.steps_per_epoch - e.step_in_epoch)
                                   : 0.0;
  // This rank's mean over the micro-batches since the last step line (the step line's, but of
  // rank 0 alone: no collective at a redraw), not the last micro-batch's.
  const double loss = interval_micro_ > 0
                          ? interval_loss_.item<double>() / static_cast<double>(interval_micro_)
                          : e.loss.item<double>();
  progress_.update(s.epoch, e.step_in_epoch, p.steps_per_epoch, loss, samples_per_s, eta);
}

// The step line: the interval's loss averaged over the ranks (a collective every rank makes
// at this step), its rates, phases, communication and memory.
void RunReporter::report_interval(const TrainState& s, const StepEvent& e) {
  const auto opts = at::TensorOptions().dtype(at::kDouble).device(ctx_.device());
  std::vector<at::Tensor> l{
      at::cat({interval_loss_, at::full({1}, static_cast<double>(interval_micro_), opts),
               at::full({1}, static_cast<double>(interval_samples_), opts)})};
  ctx_.all_reduce_sum(l, "step-line loss all_reduce");
  l[0] = l[0].cpu();
  StepReport r;
  r.epoch = s.epoch;
  r.step_in_epoch = e.step_in_epoch;
  r.steps_per_epoch = e.epoch.steps_per_epoch;
  r.global_step = s.global_step;
  r.last_step = s.lr_horizon.last_step;
  r.steps = static_cast<double>(std::max<int64_t>(interval_steps_, 1));
  // Less the step checkpoints saved in the interval (the rates are the steps'; the save's own
  // time is its record's).
  r.checkpoint_s = s.step_save_s - save_s_at_t0_;
  r.seconds = std::max(seconds_since(interval_t0_) - r.checkpoint_s, 1e-9);
  r.loss = l[0][0].item<double>() / l[0][1].item<double>();
  r.lr = s.optimizer.param_groups()[0].options().get_lr();
  const auto samples = static_cast<int64_t>(l[0][2].item<double>());  // every rank's, as trained
  samples_trained_ += samples;
  r.samples_per_s = static_cast<double>(samples) / r.seconds;
  r.tokens_per_sample = facts_.tokens_per_sample;
  r.mfu = mfu(static_cast<double>(facts_.flops_per_sample), r.samples_per_s, facts_.peak.flops_per_s,
              ctx_.world_size());
  r.has_peak = facts_.peak.flops_per_s > 0;
  r.comm = ddp_.take_stats();
  r.mem = memory_stats(ctx_.device());
  r.phases = timer_.take();
  if (s.scaler.enabled()) r.loss_scale = s.scaler.current_scale();
  if (opts_.optim.clip_grad_norm > 0)
    r.grad_norm = s.last_grad_norm.defined() ? s.last_grad_norm.item<double>() : 0.0;
  state_memory(s, ddp_, r);
  if (!progress_.active()) ctx_.log().info(format_step_line(r));  // on a terminal the progress bar stands in
  nlohmann::json rec = step_record(r);
  to_tensorboard("train", rec, s.global_step);
  metrics_.write("step", s.global_step, s.epoch, std::move(rec));
  interval_loss_.zero_();
  interval_micro_ = 0;
  interval_samples_ = 0;
  interval_steps_ = 0;
  interval_t0_ = Clock::now();
  save_s_at_t0_ = s.step_save_s;
}

std::string RunReporter::epoch_line(const TrainState& s, const EpochEvent& e) const {
  const EpochPosition& p = e.position;
  std::string line =
      str("epoch ", s.epoch,
          e.partial ? str(" part (", epoch_part(s.epoch, p.first_micro, e.micro_done, p.batches), ")")
                    : std::string(" done"),
          " | train loss ", fmt("%.4f", e.train_loss));
  if (e.train_acc >= 0) line += str(" | train acc ", fmt("%.4f", e.train_acc));
  line += str(" | ", fmt("%.1f", e.seconds), " s");
  if (!e.peak_mem_mib.empty()) {
    std::string per_rank;
    for (size_t r = 0; r < e.peak_mem_mib.size(); ++r)
      per_rank += str(r ? ", " : "", fmt("%.0f", e.peak_mem_mib[r]));
    line += str(" | peak mem per rank [", per_rank, "] MiB");
  }
  if (e.skipped_steps > 0) line += str(" | ", e.skipped_steps, " steps skipped (inf/NaN)");
  if (e.eval_interrupted) line += " | evaluation interrupted";
  if (!e.eval) return line;
  if (facts_.tokens_per_sample > 0)
    return line + str(" | val loss ", fmt("%.4f", e.eval->loss), " | val perplexity ",
                      fmt("%.2f", std::exp(e.eval->loss)));
  line += str(" | test loss ", fmt("%.4f", e.eval->loss));
  if (e.eval->accuracy >= 0) line += str(" | test acc ", fmt("%.4f", e.eval->accuracy));
  return line;
}

void RunReporter::on_epoch_end(const TrainState& s, const EpochEvent& e) {
  ctx_.log().info(epoch_line(s, e));
  const EpochPosition& p = e.position;
  nlohmann::json rec = {{"train_loss", e.train_loss},           {"epoch_s", e.seconds},
                        {"skipped_steps", e.skipped_steps},     {"partial", e.partial},
                        {"skipped_samples", e.skipped_samples}, {"micro_batches_from", p.first_micro},
                        {"micro_batches_to", e.micro_done},     {"micro_batches_per_epoch", p.batches}};
  if (e.train_acc >= 0) rec["train_acc"] = e.train_acc;
  if (e.eval) {
    rec["test_loss"] = e.eval->loss;
    if (e.eval->accuracy >= 0) rec["test_acc"] = e.eval->accuracy;
    if (facts_.tokens_per_sample > 0) {  // a language model's, under the names its line and eval use
      rec["val_loss"] = e.eval->loss;
      rec["val_perplexity"] = std::exp(e.eval->loss);
    }
  }
  if (e.eval_interrupted) rec["eval_interrupted"] = true;
  if (e.evaluation_resumed) rec["evaluation_resumed"] = true;  // Note [Evaluation owed]
  // The epoch's order was cut at another world size (Note [Resume at another world size]):
  // the micro-batches above count this run's part of the rest; these say which part of the
  // epoch's positions that was.
  if (e.positions_done_before > 0) {
    rec["positions_done_before"] = e.positions_done_before;
    rec["positions_in_epoch"] = e.positions_in_epoch;
  }
  if (!e.peak_mem_mib.empty()) rec["peak_mem_mib_per_rank"] = e.peak_mem_mib;
  rec["peak_rss_mib_per_rank"] = e.peak_rss_mib;
  // An epoch whose evaluation a stop ended: its training points now (a run never resumed keeps
  // them), its evaluation's from the run that resumes it and makes the evaluation (Note
  // [Evaluation owed]), at the same step. That run writes only those: both runs' training
  // points would be shown (its SessionLog START is at its first step, one later).
  if (e.evaluation_resumed) {
    nlohmann::json evaluation;
    for (const char* k : {"test_loss", "test_acc", "val_loss", "val_perplexity"})
      if (rec.contains(k)) evaluation[k] = rec[k];
    to_tensorboard("epoch", evaluation, s.global_step);
  } else {
    to_tensorboard("epoch", rec, s.global_step);
  }
  metrics_.write("epoch", s.global_step, s.epoch, std::move(rec));
}

// The numbers of a metrics record that TensorBoard plots, under "<group>/<name>" tags.
void RunReporter::to_tensorboard(const char* group, const nlohmann::json& rec, int64_t step) {
  if (!tensorboard_.active()) return;
  for (const auto& [k, v] : rec.items())
    if (v.is_number()) tensorboard_.scalar(str(group, "/", k), v.get<double>(), step);
}

}  // namespace ddptrain
