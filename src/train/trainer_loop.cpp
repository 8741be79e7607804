// The Trainer's epoch loop: an epoch's data, its micro-batches through the phases (Note [Loop
// phases]), the optimizer step and the stop vote, and the epoch's end (summary, evaluation,
// the callbacks). Setup, resume and the schedule: trainer.cpp.
#include <filesystem>

#include "ddp/fully_sharded.h"
#include "obs/memory.h"
#include "train/evaluate.h"
#include "train/lr_horizon.h"
#include "train/optimizer.h"
#include "train/owed_evaluation.h"
#include "train/run_reporter.h"
#include "train/train_step.h"
#include "train/trainer_impl.h"
#include "train/trainer_run.h"
#include "util/error.h"

namespace ddptrain {

// Note [Loop phases]
// A micro-batch moves through data, forward, backward and (at a group's end) the optimizer
// step. enter(p) ends the phase open, if any, and opens p: the flight recorder is told the
// phase this rank is now in (so a hang names it: Note [Flight recorder]). Ending a phase
// charges the time since the previous mark to it (StepTimer) and tells the callbacks
// (on_phase: the trace's spans). The time between end_phase and the next enter (the epoch's
// sums, the micro-batch callbacks) is charged to the next phase, as the step line counts it.
// A step ends in its own phase (the stop vote, the step's callbacks: step lines and step
// checkpoints), so none of that is charged to the next step's data wait.
void Trainer::Impl::enter(Run& run, StepTimer::Phase p) {
  end_phase(run);
  timer_.open(p);
  static const char* kFlightNames[StepTimer::kNumPhases] = {"data", "forward", "backward", "optimizer",
                                                            "step end"};
  // The step it belongs to: the next one's, but a step's end is that step's.
  ctx_.recorder().set_phase(kFlightNames[p], state_.global_step + (p == StepTimer::kStepEnd ? 0 : 1));
}

// The stop the ranks agreed on, as this rank records it: its own signal where it received one.
void Trainer::Impl::record_stop(const StopRequest& agreed, int local_signal) {
  state_.stopped_by_signal = local_signal != 0 ? local_signal : agreed.signal;
  state_.stop_requested_by = local_signal != 0 ? ctx_.rank() : agreed.rank;
}

// "SIGTERM" where this rank received it, "rank 3's SIGTERM" where another did.
std::string Trainer::Impl::stop_origin() const {
  const std::string sig = signal_name(state_.stopped_by_signal);
  return state_.stop_requested_by == ctx_.rank() ? sig : str("rank ", state_.stop_requested_by, "'s ", sig);
}

void Trainer::Impl::schedule_lrs(double position) {
  auto& groups = optimizer_.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    // A group added during the run (a backbone unfrozen at 1e-5): the rate it was added with is
    // its base (it was group 0's, silently).
    if (g == group_base_lr_.size()) group_base_lr_.push_back(groups[g].options().get_lr());
    groups[g].options().set_lr(scheduled_lr(state_.lr_horizon, opts_, group_base_lr_[g], position));
  }
}

void Trainer::Impl::end_phase(Run& run) {
  if (!timer_.is_open()) return;
  const auto [p, i] = timer_.close();
  const int64_t step =
      p == StepTimer::kOptimizer || p == StepTimer::kStepEnd ? state_.run_steps - 1 : state_.run_steps;
  for (auto& c : run.callbacks) c->on_phase(state_, {StepTimer::name(p), i.start, i.end, step});
}

// The epoch's data: the sampler's indices (from where a resume left them), or the rest of an
// epoch planned at another world size (Note [Resume at another world size]); sets run.pos and
// the epoch's plan, returns the first micro-batch.
int64_t Trainer::Impl::start_epoch_data(Run& run, int epoch) {
  const int world = ctx_.world_size();
  const int64_t B = opts_.data.batch_size, K = opts_.loop.grad_accum_steps;
  run.sampler.set_epoch(epoch);
  run.train.set_epoch(epoch);
  int64_t first = 0, batches = run.batches;
  if (epoch == run.start_epoch && run.rest) {
    state_.plan = *run.rest;
    std::vector<int64_t> mine = rest_of_epoch(run.sampler_options, epoch, *run.rest, world, ctx_.rank());
    batches = run.rest->rest_batches(world, B);  // the last one may be smaller, on every rank
    run.loader.start(std::move(mine), 0, /*keep_last_partial=*/true);
  } else {
    state_.plan = EpochPlan::fresh(run.train.size(), world, B, opts_.data.drop_last);
    state_.plan.files = run.files;
    first = epoch == run.start_epoch ? std::min(run.start_micro, run.batches) : 0;
    run.loader.start(run.sampler.indices(), first);
  }
  run.pos = {first, batches, (batches + K - 1) / K, Clock::now()};
  return first;
}

// One epoch's micro-batches, from where a resume left it; true when the loop must stop.
bool Trainer::Impl::train_epoch(Run& run) {
  const int epoch = state_.epoch;
  const int64_t K = opts_.loop.grad_accum_steps;
  if (opts_.optim.lr_schedule == LrSchedule::kEpochCosine) schedule_lrs(epoch);
  const int64_t first_micro = start_epoch_data(run, epoch);
  const int64_t batches = run.pos.batches;
  ddp_->check_still_frozen();
  run.modes.restore();  // Note [Each module keeps its mode]
  zero_grad_set_to_none(optimizer_);
  run.sums = EpochSums(ctx_.device());
  run.skipped_steps_before = state_.skipped_steps;
  state_.micro_done = first_micro;
  int64_t step_in_epoch = first_micro / K;
  timer_.restart();
  reset_peak_memory(ctx_.device());
  if (fsdp_) fsdp_->reset_peak();
  for (auto& c : run.callbacks) c->on_epoch_begin(state_, run.pos);
  const bool pinned = ctx_.device().is_cuda();
  for (int64_t micro = first_micro; micro < batches; ++micro) {
    const int64_t group_start = micro / K * K, group_size = std::min<int64_t>(K, batches - group_start);
    const bool last_in_group = micro + 1 == group_start + group_size;
    enter(run, StepTimer::kData);  // Note [Loop phases]
    auto batch = run.loader.next();
    DDP_ASSERT(batch.has_value(), "loader ended early at micro-batch ", micro);
    if (objective_.check_targets) objective_.check_targets(batch->targets);
    // From pinned memory on CUDA: the copies overlap with the work queued before them.
    at::Tensor inputs = batch->inputs.to(ctx_.device(), /*non_blocking=*/pinned);
    if (opts_.channels_last && inputs.dim() == 4) inputs = inputs.contiguous(at::MemoryFormat::ChannelsLast);
    const at::Tensor targets = batch->targets.to(ctx_.device(), /*non_blocking=*/pinned);
    enter(run, StepTimer::kForward);
    if (micro == group_start) hooks_->before_step(ctx_, state_.global_step + 1);
    const bool after_reduction = micro == group_start || !opts_.ddp.accum_no_sync;
    ForwardResult f = forward_loss(*ddp_, model_, objective_, start_.precision, ctx_.device(), inputs,
                                   targets, after_reduction);
    hooks_->on_loss(ctx_, state_.global_step + 1, f.loss);
    // Before backward: a fused loss writes its gradient over the output (Note [Fused cross-entropy]).
    const at::Tensor loss_d = f.loss.detach().to(at::kDouble);
    run.sums.add(loss_d, f.output, targets, objective_);
    enter(run, StepTimer::kBackward);
    // See Note [no_sync and accumulation].
    backward(*ddp_, scaler_, f.loss, group_size, last_in_group || !opts_.ddp.accum_no_sync);
    end_phase(run);
    state_.micro_done = micro + 1;
    for (auto& c : run.callbacks) c->on_micro_batch(state_, {micro, batch->indices, loss_d});
    if (last_in_group) enter(run, StepTimer::kOptimizer);
    if (last_in_group && step(run, step_in_epoch, loss_d)) return true;
  }
  return false;
}

// The optimizer step of a group, the stop vote, and the step callbacks; true when the loop
// must stop after it.
bool Trainer::Impl::step(Run& run, int64_t& step_in_epoch, const at::Tensor& loss) {
  if (opts_.optim.lr_schedule == LrSchedule::kStepCosine) schedule_lrs(schedule_position());
  const bool stepped = optimizer_step(state_, opts_.optim.clip_grad_norm);
  if (!stepped)
    ctx_.log().warn(str("optimizer step ", state_.global_step, " skipped: inf/NaN gradients; loss scale now ",
                        scaler_.current_scale()));
  enter(run, StepTimer::kStepEnd);
  hooks_->after_step(ctx_, state_.global_step);
  ++step_in_epoch;
  bool stopping = opts_.loop.max_steps > 0 && state_.global_step >= opts_.loop.max_steps;
  if (const StopRequest stop = run.vote.agreed()) {  // Note [Agreed stop]
    stopping = true;
    record_stop(stop, run.vote.local_signal());
    ctx_.log().warn(str("stopping after step ", state_.global_step, " on ", stop_origin(),
                        opts_.checkpoint.on_signal ? "; saving a checkpoint" : ""));
  }
  const StepEvent e{run.pos, step_in_epoch, stepped, stopping, loss};
  for (auto& c : run.callbacks) c->on_step_end(state_, e);
  state_.step_save_s = run.checkpoints->step_save_seconds();  // not the steps' time (RunReporter)
  end_phase(run);
  return stopping;
}

// The epoch's end: the summary over the ranks, evaluation (every eval_every epochs and after
// the last; a stopping job saves instead), the callbacks. True when the loop must stop.
bool Trainer::Impl::finish_epoch(Run& run, bool stopping, TrainResult& result) {
  for (auto& c : run.callbacks) c->on_epoch_trained(state_);
  run.loader.stop();
  // An epoch trained to its end owes its due evaluation even when a stop came at its last step
  // (found by that step's vote or by the drain below): the checkpoint owes it, and the evaluation,
  // interrupted by the same request, ends as a stop during it does (Note [Evaluation owed]). A
  // stop mid-epoch evaluates nothing.
  const bool complete = state_.micro_done == run.pos.batches;
  const bool eval_now = run.test && (state_.stopped_by_signal == 0 || complete) &&
                        opts_.loop.eval_every > 0 &&
                        (state_.epoch % opts_.loop.eval_every == 0 || state_.epoch == opts_.loop.epochs);
  // Never leave the vote pending across other collectives' tensors; a request it found (the vote
  // the epoch's last step started) stops the run here.
  if (const StopRequest stop = run.vote.drain(); stop && state_.stopped_by_signal == 0) {
    stopping = true;
    record_stop(stop, run.vote.local_signal());
    ctx_.log().warn(str("stopping at the end of epoch ", state_.epoch, " (step ", state_.global_step, ") on ",
                        stop_origin(), opts_.checkpoint.on_signal ? "; saving a checkpoint" : ""));
  }
  // The last forward updated each rank's BatchNorm statistics with its own data: take rank
  // 0's, so evaluation, the checkpoint and every replica agree bitwise.
  ddp_->sync_buffers();
  EpochEvent e(run.pos);
  summarize_epoch(run, e, result);
  e.stopping = stopping;
  // An evaluation that fails loses no training, nor its epoch's record (Note [Evaluation owed]).
  run.checkpoints->before_evaluation(state_, e, eval_now);
  if (eval_now) evaluate_epoch(run, e, result);
  for (auto& c : run.callbacks) c->on_epoch_end(state_, e);
  if (e.eval) run.checkpoints->evaluation_made(state_, *e.eval);
  return e.stopping;
}

// The epoch's training half of its event: the sums over the ranks (a collective), its time,
// and what part of the epoch this run trained.
void Trainer::Impl::summarize_epoch(Run& run, EpochEvent& e, TrainResult& result) {
  e.seconds = seconds_since(run.pos.started);
  run.train_time += e.seconds;
  const std::vector<std::string> skipped = run.train.take_skipped();
  const EpochSums::Summary s =
      run.sums.reduce(ctx_, static_cast<bool>(objective_.correct), static_cast<int64_t>(skipped.size()));
  e.skipped_samples =
      run.unreadable.count_new(ctx_, skipped, s.skipped_samples, "skipped a sample that does not read: ");
  e.train_loss = result.train_loss = s.train_loss;
  e.train_acc = s.train_acc;
  e.peak_mem_mib = s.peak_mem_mib;
  e.peak_rss_mib = s.peak_rss_mib;
  e.skipped_steps = state_.skipped_steps - run.skipped_steps_before;
  // What the statistics cover: the whole epoch, or only the micro-batches this run trained
  // of it (a resume began mid-epoch, or a stop ended it early).
  e.micro_done = state_.micro_done;
  e.partial = run.pos.first_micro > 0 || state_.micro_done < run.pos.batches || state_.plan.done > 0;
  result.last_epoch_part =
      e.partial ? epoch_part(state_.epoch, run.pos.first_micro, state_.micro_done, run.pos.batches) : "";
  if (state_.plan.done > 0 && run.pos.first_micro == 0) {  // Note [Resume at another world size]
    e.positions_done_before = state_.plan.done;
    e.positions_in_epoch = state_.plan.end;
  }
}

// The epoch's evaluation into e (or, on a stop request during it, a stop as after a step).
void Trainer::Impl::evaluate_epoch(Run& run, EpochEvent& e, TrainResult& result) {
  ctx_.recorder().set_phase("evaluation", state_.global_step);
  hooks_->in_evaluation(ctx_, state_.epoch);
  const EvalResult ev = evaluate(model_, objective_, *run.test,
                                 {opts_.data.batch_size, opts_.data.num_workers, opts_.stop_requested}, ctx_);
  for (const auto& why : run.test->take_skipped())
    ctx_.log().warn("skipped an evaluation sample that does not read: " + why);
  if (ev.interrupted) {  // a stop request: stop as after a step (save, return)
    e.stopping = e.eval_interrupted = true;
    record_stop(ev.stop, opts_.stop_requested ? opts_.stop_requested() : 0);
    ctx_.log().warn(str("stopping during the evaluation on ", stop_origin()));
    return;
  }
  e.eval = ev;
  result.evaluated = true;
  result.test_loss = ev.loss;
  result.test_accuracy = ev.accuracy;
}

// Note [Evaluation owed]: the evaluation of the epoch the resumed checkpoint ended, which the
// run that trained it did not finish, and the epoch's record. True when a stop request came
// during it (the run stops before it trains).
bool Trainer::Impl::make_owed_evaluation(Run& run, TrainResult& result) {
  const OwedEvaluation& owed = *run.owed;
  ctx_.log().info(str("epoch ", owed.epoch, "'s evaluation was not made by the run that trained it ",
                      "(it ended during the evaluation): making it now (Note [Evaluation owed])"));
  const int epoch_now = state_.epoch;
  state_.epoch = owed.epoch;
  EpochEvent e = owed.event();
  evaluate_epoch(run, e, result);
  // Only a made evaluation has a record (an interrupted one stays owed); the checkpoint policy
  // saves nothing at the step resumed from.
  if (e.eval)
    for (auto& c : run.callbacks)
      if (c != run.checkpoints) c->on_epoch_end(state_, e);
  state_.epoch = epoch_now;
  if (e.eval) evaluation_made_for(owed.epoch, *e.eval);
  return e.stopping;
}

// Says in the resumed checkpoint that its evaluation was made, where it is this run's to say:
// in its checkpoint folder (another run's checkpoint owes its own run the record; with
// checkpoint.dir "", save nothing, a later resume evaluates again).
void Trainer::Impl::evaluation_made_for(int epoch, const EvalResult& ev) {
  namespace fs = std::filesystem;
  const std::string& from = opts_.checkpoint.resume_from;
  std::error_code ec;
  fs::path checkpoint = fs::absolute(from).lexically_normal();
  if (!checkpoint.has_filename()) checkpoint = checkpoint.parent_path();  // given as "ck/epoch_0003/"
  const bool ours =
      !opts_.checkpoint.dir.empty() && fs::equivalent(checkpoint.parent_path(), opts_.checkpoint.dir, ec);
  if (ours)
    record_evaluation_made(ctx_, from, epoch, ev);
  else
    ctx_.log().info(str("'", from,
                        "' is not in checkpoint.dir (--checkpoint_dir): it still owes its own run epoch ",
                        epoch, "'s evaluation (Note [Evaluation owed])"));
}

}  // namespace ddptrain
