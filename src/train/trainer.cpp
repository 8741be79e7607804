#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>

#include <torch/nn/functional/loss.h>
#include <torch/nn/utils/clip_grad.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/python_pickle.h"
#include "checkpoint/state_dict_reader.h"
#include "checkpoint/weights_file.h"
#include "config/run_identity.h"
#include "data/augment.h"
#include "data/datasets.h"
#include "data/distributed_sampler.h"
#include "data/loader.h"
#include "ddp/bucket_size.h"
#include "ddp/ddp.h"
#include "ddp/sync_batchnorm.h"
#include "obs/chrome_trace.h"
#include "obs/kernel_probe.h"
#include "obs/memory.h"
#include "obs/metrics.h"
#include "obs/mfu.h"
#include "obs/progress.h"
#include "obs/tensorboard.h"
#include "models/build_model.h"
#include "train/resume.h"
#include "train/step_report.h"
#include "train/step_timer.h"
#include "train/evaluate.h"
#include "train/grad_scaler.h"
#include "train/optimizer.h"
#include "train/precision.h"
#include "train/stop_signal.h"
#include "util/env.h"
#include "util/error.h"
#include "util/clock.h"
#include "util/fault.h"
#include "util/thread_policy.h"
#include "util/torch_compat.h"

namespace ddptrain {
namespace {

// zero_grad(set_to_none=True), as the reference: frees the gradients instead of zeroing
// them (LibTorch 1.13's Optimizer::zero_grad has no set_to_none).
void zero_grad_set_to_none(torch::optim::Optimizer& opt) {
  for (auto& group : opt.param_groups())
    for (auto& p : group.params()) p.mutable_grad().reset();
}

constexpr uint64_t kFnvOffset = 1469598103934665603ull, kFnvPrime = 1099511628211ull;

// Folds a tensor's bytes into an FNV-1a hash.
uint64_t fnv1a(uint64_t h, const at::Tensor& t) {
  auto c = t.detach().cpu().contiguous();
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

// FNV-1a over the bytes of every parameter and buffer: equal on all ranks iff the replicas
// are bitwise identical; logged by every rank at the end so divergence is visible.
uint64_t state_fingerprint(const torch::nn::Module& m) {
  uint64_t h = kFnvOffset;
  for (const auto& [name, t] : state_dict(m)) h = fnv1a(h, t);
  return h;
}

// The same hash over the optimizer's state tensors, in parameter order (a marker where a
// parameter has none yet): resumed and uninterrupted runs must agree on optimizer state too.
uint64_t optimizer_fingerprint(torch::optim::Optimizer& opt) {
  uint64_t h = kFnvOffset;
  for (const auto& t : optimizer_state_tensors(opt)) h = t.defined() ? fnv1a(h, t) : (h ^ 0xffu) * kFnvPrime;
  return h;
}

// See Note [Precision chosen by measurement]. Every rank must train in the same precision,
// so the choice is made from the rates averaged over all ranks (each rank computes the same
// choice from the same sums). Whether to average depends only on the config, the device type
// and the checkpoint resumed: every rank joins the all-reduce, or none does.
Precision agreed_precision(const TrainConfig& cfg, const DistContext& ctx, CpuKernelRates rates) {
  PrecisionRequest req{cfg.run.use_amp, cfg.optim.amp_dtype, cfg.optim.grad_scaler, ""};
  if (!cfg.run.resume_from.empty()) req.resumed = read_checkpoint_meta(cfg.run.resume_from).precision;
  const bool measured = ctx.device().is_cpu() && req.use_amp && req.amp_dtype == "auto" && req.resumed.empty();
  if (measured && ctx.communicates()) {
    std::vector<at::Tensor> sums{at::tensor({rates.conv_fp32, rates.matmul_fp32, rates.conv_bf16, rates.matmul_bf16},
                                            at::kDouble)};
    ctx.all_reduce_sum(sums, "kernel-probe all_reduce (--amp_dtype auto)");
    const at::Tensor mean = sums[0] / ctx.world_size();
    rates = {mean[0].item<double>(), mean[1].item<double>(), mean[2].item<double>(), mean[3].item<double>()};
  }
  Precision p = choose_precision(req, ctx.device(), cuda_has_bf16(ctx.device()), rates);
  if (measured && ctx.world_size() > 1) p.why += str(" (rates averaged over ", ctx.world_size(), " ranks)");
  return p;
}

// What a run measures at start-up, before DDP is built.
struct StartMeasurements {
  Precision prec;
  PeakFlops peak;                // for MFU (obs/mfu.h)
  int64_t flops_per_sample = 0;  // training FLOPs
  double backward_s = 0;         // estimated, for --bucket_cap_mb auto
};

// The kernel probe (the CPU's peak for MFU, and what --amp_dtype auto chooses from; skipped
// where neither needs it), the precision, the peak and the backward estimate, logged.
StartMeasurements measure_start(const TrainConfig& cfg, const DistContext& ctx, const Model& model) {
  const bool amp_auto = cfg.run.use_amp && cfg.optim.amp_dtype == "auto";
  const bool probe = ctx.device().is_cpu() && (cfg.run.peak_tflops <= 0 || amp_auto);
  const CpuKernelRates rates =
      probe ? probe_cpu_kernels(cfg.run.use_amp && cfg.optim.amp_dtype != "fp16") : CpuKernelRates{};
  StartMeasurements m;
  m.prec = agreed_precision(cfg, ctx, rates);
  ctx.log().info("precision: " + m.prec.why);
  m.flops_per_sample = model.train_flops_per_sample();
  m.peak = peak_flops(ctx.device(), m.prec.autocast, cfg.run.peak_tflops, rates);
  ctx.log().info(str("model FLOPs: ", static_cast<double>(m.flops_per_sample) / 1e9,
                     " GFLOP per training sample; peak for MFU: ", m.peak.source));
  // Backward is about 2/3 of a step's FLOPs; at the peak rate this underestimates it, which
  // only makes --bucket_cap_mb auto more careful about the number of buckets.
  if (m.peak.flops_per_s > 0)
    m.backward_s = 2.0 / 3.0 * static_cast<double>(m.flops_per_sample) * cfg.data.batch_size / m.peak.flops_per_s;
  return m;
}

// DDP's options from the config; --bucket_cap_mb auto measures the link (a collective: the
// branch depends only on the config and the world, the same on every rank).
DdpOptions ddp_options(const TrainConfig& cfg, const DistContext& ctx, const torch::nn::Module& model,
                       double backward_s) {
  DdpOptions o;
  if (cfg.dist.bucket_cap_mb) {
    o.reducer.bucket_cap_bytes = static_cast<size_t>(*cfg.dist.bucket_cap_mb * (1 << 20));
  } else if (ctx.communicates() && ctx.world_size() > 1) {
    int64_t grad_bytes = 0;
    for (const auto& p : model.parameters())
      if (p.requires_grad()) grad_bytes += p.numel() * static_cast<int64_t>(p.element_size());
    const BucketCapChoice c = agreed_bucket_cap(ctx, grad_bytes, backward_s);
    ctx.log().info(c.why);
    o.reducer.bucket_cap_bytes = c.cap_bytes;
  }
  o.reducer.first_bucket_bytes = static_cast<size_t>(cfg.dist.first_bucket_mb * (1 << 20));
  o.reducer.gradient_as_bucket_view = cfg.dist.gradient_as_bucket_view;
  o.reducer.find_unused_parameters = cfg.dist.find_unused_parameters;
  o.reducer.comm_hook = parse_comm_hook(cfg.dist.ddp_comm_hook);
  o.reducer.overlap = cfg.dist.ddp_overlap;
  o.broadcast_buffers = cfg.dist.broadcast_buffers;
  return o;
}

// Why a resumed run has nothing left to train (--max_steps reached, or every epoch done), or
// "" when it has. The same on every rank: it reads the checkpoint's position only.
std::string nothing_left_to_train(const TrainConfig& cfg, int64_t global_step, int start_epoch) {
  if (cfg.optim.max_steps > 0 && global_step >= cfg.optim.max_steps)
    return str("the checkpoint is at step ", global_step, ", and --max_steps=", cfg.optim.max_steps,
               " is reached; raise --max_steps to train further");
  if (start_epoch > cfg.optim.epochs)
    return str("the checkpoint completed epoch ", start_epoch - 1, ", and --epochs=", cfg.optim.epochs,
               " is reached; raise --epochs to train further");
  return "";
}

std::string hex_fingerprint(uint64_t v) {
  char fp[32];
  std::snprintf(fp, sizeof(fp), "%016llx", static_cast<unsigned long long>(v));
  return fp;
}

}  // namespace

TrainResult train(const TrainConfig& cfg, const DistContext& ctx, const std::string& config_json) {
  const Logger& log = ctx.log();
  const int K = cfg.optim.grad_accum_steps;

  // Intra-op threads: share the cores among the local ranks unless told otherwise.
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const int threads = threads_per_rank(cfg.run.threads, cores, ctx.local_world_size());
  torch::set_num_threads(threads);
  if (threads_outnumber_cores(ctx.local_world_size(), threads, cores) && !env::get("OMP_WAIT_POLICY"))
    log.warn(str(ctx.local_world_size(), " local ranks x ", threads, " intra-op threads > ", cores, " cores, and OpenMP's "
                 "threads spin: set OMP_WAIT_POLICY=PASSIVE (ddptrain launch does) or lower --threads (Note [OpenMP "
                 "threads of ranks that share cores])"));

  // Data: the real datasets decide channels, image size and classes; token datasets take
  // the model's block size and vocabulary.
  DataSplits data = make_datasets(cfg.data, token_spec(cfg.model), static_cast<uint64_t>(cfg.run.seed));
  if (cfg.data.augment) {  // see Note [Augmentation is a pure function]
    log.info("augmentation: " + augment_summary(cfg.data.dataset));
  }
  const DatasetShape shape = data.train->shape();

  // Model: the same seed on every rank, so every rank builds the same weights (DDP's
  // broadcast then makes it certain); afterwards each rank draws from seed + rank.
  torch::manual_seed(static_cast<uint64_t>(cfg.run.seed));
  std::shared_ptr<Model> model =
      build_model(cfg.model, shape, cfg.dist.sync_bn ? sync_batchnorm_factory(ctx) : NormFactory(default_norm));
  if (!cfg.run.init_from.empty() && cfg.run.resume_from.empty()) {
    load_state_dict(*model, read_weights_file(cfg.run.init_from, log), cfg.run.init_from);
    log.info(str("initial weights from ", cfg.run.init_from));
  }
  model->to(ctx.device());
  torch::manual_seed(static_cast<uint64_t>(cfg.run.seed + ctx.rank()));
  log.info(str("model ", model->describe(), ": ",
               with_commas(static_cast<double>(count_parameters(*model))), " parameters"));

  const StartMeasurements start = measure_start(cfg, ctx, *model);
  const Precision& prec = start.prec;
  const PeakFlops& peak = start.peak;
  const int64_t flops_per_sample = start.flops_per_sample;
  DistributedDataParallel ddp(model, ctx, ddp_options(cfg, ctx, *model, start.backward_s));
  // After DDP's start-up broadcast, so the collectives see plain contiguous tensors; every
  // rank converts the same way. See Note [Channels last].
  const bool channels_last = uses_channels_last(cfg.model);
  if (channels_last) to_channels_last(*model);
  log.info(str("DDP: world ", ctx.world_size(), ", backend ", ctx.backend_name(), ", device ",
               ctx.device().str(), ", ", ddp.num_buckets(), " gradient buckets, ", threads,
               " intra-op threads per rank", channels_last ? ", channels-last layout" : ""));
  if (cfg.model.activation_checkpointing == "blocks")
    log.info("activation checkpointing: each block is recomputed in backward");
  GradScaler scaler({prec.grad_scaler, cfg.optim.scaler_init_scale, 2.0, 0.5, cfg.optim.scaler_growth_interval});

  const std::unique_ptr<torch::optim::Optimizer> optimizer_owner = build_optimizer(cfg.optim, model->parameters());
  torch::optim::Optimizer& optimizer = *optimizer_owner;
  const bool lr_per_step = cfg.effective_lr_schedule() == "step_cosine";

  // Resume: model, optimizer, RNG state, and the position in the data (epoch, micro-batch).
  int start_epoch = 1;
  int64_t start_micro = 0;
  TrainResult result;
  if (!cfg.run.resume_from.empty()) {
    CheckpointMeta meta = load_checkpoint(cfg.run.resume_from, ctx, *model, optimizer);
    if (meta.scaler) scaler.load(*meta.scaler);
    start_epoch = meta.epoch_complete ? meta.epoch + 1 : meta.epoch;
    start_micro = resume_micro_batch(meta, cfg.data.batch_size, K);  // samples, in this run's batches
    result.global_step = meta.global_step;
    log.info(str("resumed from ", cfg.run.resume_from, ": step ", meta.global_step, ", continuing at epoch ",
                 start_epoch, " micro-batch ", start_micro));
    result.nothing_to_train = nothing_left_to_train(cfg, result.global_step, start_epoch);
    if (!result.nothing_to_train.empty()) {
      log.info(str("nothing to train: ", result.nothing_to_train, " (no new checkpoint)"));
      result.fingerprint = hex_fingerprint(state_fingerprint(*model));
      return result;
    }
  }
  const FaultPlan faults = FaultPlan::from_env();
  const RunIdentity identity = run_identity(cfg);  // Note [Run identity]
  auto save = [&](int epoch, int64_t batches_done, bool complete) {
    CheckpointMeta meta{epoch, batches_done, complete, result.global_step, ctx.world_size(), cfg.run.seed, {},
                        prec.name(), identity, cfg.data.batch_size};
    if (scaler.enabled()) meta.scaler = scaler.state();
    char name[64];
    if (complete)
      std::snprintf(name, sizeof(name), "epoch_%04d", epoch);
    else
      std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(result.global_step));
    SaveOptions so{cfg.run.keep_checkpoints, [&](const char* stage) { faults.in_save(result.global_step, stage); }};
    result.last_checkpoint =
        save_checkpoint(ctx, cfg.run.checkpoint_dir, name, *model, optimizer, meta, config_json, std::move(so));
    log.info(str("checkpoint saved: ", result.last_checkpoint));
  };
  const auto due_by_steps = [&] {
    return cfg.run.save_every_steps > 0 && result.global_step % cfg.run.save_every_steps == 0;
  };

  SamplerOptions so;
  so.dataset_len = data.train->size();
  so.world_size = ctx.world_size();
  so.rank = ctx.rank();
  so.seed = static_cast<uint64_t>(cfg.run.seed);
  DistributedSampler sampler(so);
  LoaderOptions lo{cfg.data.batch_size, cfg.data.num_workers, cfg.data.prefetch_factor, /*drop_last=*/true};
  lo.pin_memory = ctx.device().is_cuda();
  Loader loader(*data.train, lo);
  const int64_t batches = loader.num_batches(sampler.num_samples());
  // See Note [Partial accumulation groups].
  const int64_t steps_per_epoch = (batches + K - 1) / K;
  DDP_USAGE_CHECK(batches > 0, "an epoch has no full batch per rank (", sampler.num_samples(), " samples, --batch_size=",
                  cfg.data.batch_size, "); lower --batch_size or add data");
  if (batches % K != 0)
    log.info(str("the last optimizer step of each epoch accumulates ", batches % K, " micro-batches instead of ", K,
                 " (its loss is averaged over ", batches % K, ")"));
  const int64_t global_batch = static_cast<int64_t>(cfg.data.batch_size) * K * ctx.world_size();
  log.info(str("data ", cfg.data.dataset, ": ", data.train->size(), " samples, ", steps_per_epoch,
               " steps per epoch, global batch ", global_batch,
               shape.is_tokens() ? str(" sequences of ", shape.block_size, " tokens") : std::string()));
  // The per-step schedule spans the whole run: every epoch, or --max_steps when sooner.
  int64_t total_steps = steps_per_epoch * cfg.optim.epochs;
  if (cfg.optim.max_steps > 0) total_steps = std::min<int64_t>(total_steps, cfg.optim.max_steps);
  log.info(lr_per_step ? str("optimizer ", cfg.optim.optimizer, ", lr ", cfg.optim.lr, ": linear warmup over ",
                             cfg.optim.warmup_steps, " steps, then cosine to ", cfg.optim.lr * cfg.optim.min_lr_ratio,
                             " at step ", total_steps)
                       : str("optimizer ", cfg.optim.optimizer, ", lr ", cfg.optim.lr, ": cosine per epoch over ",
                             cfg.optim.epochs, " epochs"));

  // Stop requests (SIGTERM/SIGINT) are agreed on by all ranks: each step starts an async sum
  // of the local flags and the next step reads it, so every rank stops after the same step
  // and the exchange costs no waiting.
  std::vector<at::Tensor> stop_votes{at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(ctx.device()))};
  compat::WorkHandle stop_work;
  auto agreed_stop = [&]() -> bool {
    if (ctx.world_size() == 1) return stop_signal() != 0;
    bool stop_now = false;
    if (stop_work) {
      ctx.wait(stop_work, "stop-signal all_reduce");
      stop_work.reset();
      stop_now = stop_votes[0].item<int>() > 0;
    }
    if (!stop_now) {
      stop_votes[0].fill_(stop_signal() != 0 ? 1 : 0);
      stop_work = ctx.all_reduce_sum_async(stop_votes);
    }
    return stop_now;
  };
  // The data order, for debugging and for the exact-resume tests.
  std::unique_ptr<std::ofstream> trace;
  if (!cfg.run.trace_samples_dir.empty()) {
    std::filesystem::create_directories(cfg.run.trace_samples_dir);
    const std::string path = cfg.run.trace_samples_dir + "/rank" + std::to_string(ctx.rank()) + ".txt";
    trace = std::make_unique<std::ofstream>(path, std::ios::app);
    DDP_CHECK(trace->good(), "cannot open --trace_samples_dir file '", path, "'");
  }
  StepTimer timer;
  ChromeTrace profile(cfg.run.enable_profiling
                        ? cfg.run.checkpoint_dir + "/trace_rank" + std::to_string(ctx.rank()) + ".json"
                        : "",
                    ctx.rank());
  int64_t trained_steps = 0;
  auto phase = [&](StepTimer::Phase p) {
    const auto i = timer.mark(p);
    profile.add(StepTimer::name(p), i.start, i.end, trained_steps);
  };
  MetricsWriter metrics(cfg.run.metrics_file, ctx.is_main());
  metrics.write("run", result.global_step, start_epoch,
                {{"precision", prec.name()}, {"precision_why", prec.why}, {"world_size", ctx.world_size()},
                 {"backend", ctx.backend_name()}, {"threads_per_rank", threads}, {"buckets", ddp.num_buckets()},
                 {"bucket_cap_mb", static_cast<double>(ddp.bucket_cap_bytes()) / (1 << 20)},
                 {"peak_flops_per_s", peak.flops_per_s}, {"peak_source", peak.source}});
  ProgressBar progress(ctx.is_main());
  TensorBoardWriter tensorboard(cfg.run.tensorboard_dir, ctx.is_main());
  // The numbers of a metrics record that TensorBoard plots, under "<group>/<name>" tags.
  auto to_tensorboard = [&](const char* group, const nlohmann::json& rec) {
    if (!tensorboard.active()) return;
    for (const auto& [k, v] : rec.items())
      if (v.is_number()) tensorboard.scalar(str(group, "/", k), v.get<double>(), result.global_step);
  };
  double last_grad_norm = 0;
  int64_t skipped_steps = 0;
  double train_time = 0;
  bool stop = false;
  for (int epoch = start_epoch; epoch <= cfg.optim.epochs && !stop; ++epoch) {
    if (!lr_per_step) set_lr(optimizer, cosine_lr(cfg.optim.lr, epoch - 1, cfg.optim.epochs));
    sampler.set_epoch(epoch);
    data.train->set_epoch(epoch);
    const int64_t first_micro = epoch == start_epoch ? std::min(start_micro, batches) : 0;
    loader.start(sampler.indices(), first_micro);
    model->train();
    zero_grad_set_to_none(optimizer);
    const auto epoch_t0 = Clock::now();
    auto interval_t0 = Clock::now();
    // Loss and correct predictions stay on the device, read only at step lines and at the
    // epoch's end: no host sync per micro-step, as Python DDP loops run. Double sums, added in
    // the same order as host doubles would be: the logged numbers are unchanged.
    const auto sum_options = at::TensorOptions().dtype(at::kDouble).device(ctx.device());
    at::Tensor epoch_sums = at::zeros({2}, sum_options);  // (sum of loss x samples, correct)
    at::Tensor interval_loss = at::zeros({1}, sum_options);
    double epoch_count = 0;
    int64_t interval_micro = 0, interval_steps = 0, step_in_epoch = first_micro / K, micro_done = first_micro;
    timer.restart();
    reset_peak_memory(ctx.device());
    for (int64_t micro = first_micro; micro < batches; ++micro) {
      const int64_t group_start = micro / K * K, group_size = std::min<int64_t>(K, batches - group_start);
      const bool last_in_group = micro + 1 == group_start + group_size;
      auto batch = loader.next();
      DDP_ASSERT(batch.has_value(), "loader ended early at micro-batch ", micro);
      if (trace) {
        *trace << "epoch " << epoch << " micro " << micro << ":";
        for (int64_t i : batch->indices) *trace << ' ' << i;
        *trace << '\n' << std::flush;
      }
      // From pinned memory on CUDA: the copies overlap with the work queued before them.
      auto inputs = batch->inputs.to(ctx.device(), /*non_blocking=*/lo.pin_memory);
      if (channels_last) inputs = inputs.contiguous(at::MemoryFormat::ChannelsLast);
      auto targets = batch->targets.to(ctx.device(), /*non_blocking=*/lo.pin_memory);
      phase(StepTimer::kData);
      ddp.sync_buffers();
      at::Tensor logits, loss;
      {
        compat::AutocastGuard autocast(ctx.device().type(), prec.dtype, prec.autocast);
        logits = model->forward(inputs);
        // Classes (B, C) or next tokens (B, T, V): the mean over every prediction; fp32
        // under autocast.
        loss = torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
      }
      if (faults.poison_loss(ctx.rank(), result.global_step + 1)) loss = loss * std::nan("");
      phase(StepTimer::kForward);
      {
        // Micro-steps of a group accumulate locally; its last one all-reduces (during
        // backward). See Note [no_sync and accumulation].
        std::optional<DistributedDataParallel::NoSyncGuard> local;
        if (!last_in_group && cfg.dist.accum_no_sync) local.emplace(ddp);
        scaler.scale(loss / static_cast<double>(group_size)).backward();
      }
      phase(StepTimer::kBackward);
      const at::Tensor loss_d = loss.detach().to(at::kDouble);
      epoch_sums[0].add_(loss_d * static_cast<double>(targets.numel()));
      epoch_sums[1].add_(logits.argmax(-1).eq(targets).sum());
      epoch_count += static_cast<double>(targets.numel());
      interval_loss.add_(loss_d);
      ++interval_micro;
      micro_done = micro + 1;
      if (!last_in_group) continue;

      // Unscale, clip and step (skipped on inf/NaN gradients, then the same on every rank).
      if (lr_per_step)
        set_lr(optimizer, warmup_cosine_lr(cfg.optim.lr, result.global_step, cfg.optim.warmup_steps, total_steps,
                                           cfg.optim.min_lr_ratio));
      scaler.unscale(optimizer);
      if (cfg.optim.clip_grad_norm > 0) {
        last_grad_norm = torch::nn::utils::clip_grad_norm_(model->parameters(), cfg.optim.clip_grad_norm);
      }
      const bool stepped = scaler.step(optimizer);
      scaler.update();
      if (!stepped) {
        ++skipped_steps;
        log.warn(str("optimizer step ", result.global_step + 1, " skipped: inf/NaN gradients; loss scale now ",
                     scaler.current_scale()));
      }
      zero_grad_set_to_none(optimizer);
      phase(StepTimer::kOptimizer);
      ++result.global_step;
      faults.after_step(ctx.rank(), result.global_step);
      ++step_in_epoch;
      ++trained_steps;
      ++interval_steps;
      if (progress.active()) {  // a terminal only: the bar reads the loss every step
        const double elapsed = seconds_since(epoch_t0);
        const int64_t done_here = step_in_epoch - first_micro / K;
        progress.update(epoch, step_in_epoch, steps_per_epoch, loss.item<double>(),
                        static_cast<double>(micro_done - first_micro) * cfg.data.batch_size * ctx.world_size() / elapsed,
                        done_here > 0 ? elapsed / static_cast<double>(done_here) * static_cast<double>(steps_per_epoch - step_in_epoch) : 0.0);
      }
      if (profile.maybe_write(trained_steps - 1))
        log.info(str("profiler trace (Chrome trace format; open in Perfetto or chrome://tracing): ",
                     cfg.run.checkpoint_dir, "/trace_rank", ctx.rank(), ".json"));
      stop = cfg.optim.max_steps > 0 && result.global_step >= cfg.optim.max_steps;
      if (agreed_stop()) {
        stop = true;
        result.stopped_by_signal = stop_signal() != 0 ? stop_signal() : 15;
        log.warn(str("stopping after step ", result.global_step, " on a signal", cfg.run.checkpoint_on_signal ? "; saving a checkpoint" : ""));
      }

      // Step line: loss averaged over the ranks (a collective every rank makes at this step).
      if (step_in_epoch % cfg.run.log_interval == 0 || step_in_epoch == steps_per_epoch || stop) {
        std::vector<at::Tensor> l{at::cat({interval_loss, at::full({1}, static_cast<double>(interval_micro), sum_options)})};
        ctx.all_reduce_sum(l, "step-line loss all_reduce");
        l[0] = l[0].cpu();
        StepReport r;
        r.epoch = epoch;
        r.step_in_epoch = step_in_epoch;
        r.steps_per_epoch = steps_per_epoch;
        r.steps = static_cast<double>(std::max<int64_t>(interval_steps, 1));
        r.seconds = seconds_since(interval_t0);
        r.loss = l[0][0].item<double>() / l[0][1].item<double>();
        r.lr = optimizer.param_groups()[0].options().get_lr();
        r.samples_per_s = static_cast<double>(interval_micro) * cfg.data.batch_size * ctx.world_size() / r.seconds;
        r.tokens_per_sample = shape.block_size;
        r.mfu = mfu(static_cast<double>(flops_per_sample), r.samples_per_s, peak.flops_per_s, ctx.world_size());
        r.has_peak = peak.flops_per_s > 0;
        r.comm = ddp.take_stats();
        r.mem = memory_stats(ctx.device());
        r.phases = timer.take();
        if (scaler.enabled()) r.loss_scale = scaler.current_scale();
        if (cfg.optim.clip_grad_norm > 0) r.grad_norm = last_grad_norm;
        if (!progress.active()) log.info(format_step_line(r));  // on a terminal the progress bar stands in
        nlohmann::json rec = step_record(r);
        to_tensorboard("train", rec);
        metrics.write("step", result.global_step, epoch, std::move(rec));
        interval_loss.zero_();
        interval_micro = 0;
        interval_steps = 0;
        interval_t0 = Clock::now();
      }
      // Mid-epoch checkpoint every save_every_steps optimizer steps (the end of an epoch
      // saves below, once).
      if (due_by_steps() && micro_done < batches && !stop) save(epoch, micro_done, false);
      if (stop) break;
    }
    progress.finish();
    loader.stop();
    if (stop_work) {  // never leave the stop vote pending across other collectives' tensors
      ctx.wait(stop_work, "stop-signal all_reduce");
      stop_work.reset();
    }
    // The last forward updated each rank's BatchNorm statistics with its own data: take rank
    // 0's, so evaluation, the checkpoint and every replica agree bitwise.
    ddp.sync_buffers();
    const double epoch_s = seconds_since(epoch_t0);
    train_time += epoch_s;

    // Epoch summary over all ranks.
    // One all-reduce for the sums, every rank's peak tensor memory and its peak RSS (a slot
    // per rank each).
    const MemoryStats mem = memory_stats(ctx.device());
    const int W = ctx.world_size();
    at::Tensor summary = at::zeros({3 + 2 * W}, sum_options);
    summary.narrow(0, 0, 2).copy_(epoch_sums);
    summary[2] = epoch_count;
    summary[3 + ctx.rank()] = static_cast<double>(mem.peak_bytes);
    summary[3 + W + ctx.rank()] = static_cast<double>(peak_rss_bytes());
    std::vector<at::Tensor> sums{summary};
    ctx.all_reduce_sum(sums, "epoch-summary all_reduce");
    sums[0] = sums[0].cpu();
    result.train_loss = sums[0][0].item<double>() / sums[0][2].item<double>();
    const double train_acc = sums[0][1].item<double>() / sums[0][2].item<double>();
    // What the statistics cover: the whole epoch, or only the micro-batches this run trained
    // of it (a resume began mid-epoch, or a stop ended it early).
    const bool partial = first_micro > 0 || micro_done < batches;
    result.last_epoch_part = partial ? str("micro-batches ", first_micro + 1, "-", micro_done, " of ", batches,
                                           " of epoch ", epoch)
                                     : "";
    std::string line = str("epoch ", epoch, partial ? str(" part (", result.last_epoch_part, ")") : " done",
                           " | train loss ", fmt("%.4f", result.train_loss), " | train acc ", fmt("%.4f", train_acc),
                           " | ", fmt("%.1f", epoch_s), " s");
    // Slots per rank of the summary, in MiB.
    auto per_rank_mib = [&](int offset) {
      std::vector<double> v;
      for (int r = 0; r < W; ++r) v.push_back(sums[0][offset + r].item<double>() / (1 << 20));
      return v;
    };
    const std::vector<double> peak_mem_mib = per_rank_mib(3);
    if (mem.peak_bytes >= 0) {
      std::string per_rank;
      for (int r = 0; r < W; ++r) per_rank += str(r ? ", " : "", fmt("%.0f", peak_mem_mib[static_cast<size_t>(r)]));
      line += str(" | peak mem per rank [", per_rank, "] MiB");
    }
    if (skipped_steps > 0) line += str(" | ", skipped_steps, " steps skipped (inf/NaN)");
    // Evaluation every --eval_every epochs and after the last; a stopping job saves instead.
    const bool eval_now = data.test && result.stopped_by_signal == 0 && cfg.run.eval_every > 0 &&
                          (epoch % cfg.run.eval_every == 0 || epoch == cfg.optim.epochs);
    bool evaluated = false;
    if (eval_now) {
      const EvalResult ev = evaluate(*model, *data.test, cfg.data.batch_size, cfg.data.num_workers, ctx);
      evaluated = !ev.interrupted;
      if (ev.interrupted) {  // a signal: stop as after a step (save, exit 128 + signal)
        stop = true;
        result.stopped_by_signal = stop_signal() != 0 ? stop_signal() : 15;
        line += " | evaluation interrupted";
      } else {
        result.test_loss = ev.loss;
        result.test_accuracy = ev.accuracy;
        line += shape.is_tokens()
                    ? str(" | val loss ", fmt("%.4f", ev.loss), " | val perplexity ", fmt("%.2f", std::exp(ev.loss)))
                    : str(" | test loss ", fmt("%.4f", ev.loss), " | test acc ", fmt("%.4f", ev.accuracy));
      }
    }
    log.info(line);
    {
      nlohmann::json rec = {{"train_loss", result.train_loss}, {"train_acc", train_acc}, {"epoch_s", epoch_s},
                            {"skipped_steps", skipped_steps}, {"partial", partial},
                            {"micro_batches_from", first_micro}, {"micro_batches_to", micro_done},
                            {"micro_batches_per_epoch", batches}};
      if (evaluated) {
        rec["test_loss"] = result.test_loss;
        rec["test_acc"] = result.test_accuracy;
      }
      if (mem.peak_bytes >= 0) rec["peak_mem_mib_per_rank"] = peak_mem_mib;
      rec["peak_rss_mib_per_rank"] = per_rank_mib(3 + W);
      to_tensorboard("epoch", rec);
      metrics.write("epoch", result.global_step, epoch, std::move(rec));
    }

    // Checkpoint every save_every epochs, when save_every_steps falls here, and at the end.
    const bool epoch_complete = micro_done == batches;
    const bool last = (stop && (result.stopped_by_signal == 0 || cfg.run.checkpoint_on_signal)) || epoch == cfg.optim.epochs;
    const bool periodic = cfg.run.save_every > 0 && epoch % cfg.run.save_every == 0 && epoch_complete;
    if (periodic || last || due_by_steps()) save(epoch, micro_done, epoch_complete);
  }
  result.fingerprint = hex_fingerprint(state_fingerprint(*model));
  log.info_all_ranks(str("parameter fingerprint: ", result.fingerprint));
  log.info_all_ranks(str("optimizer state fingerprint: ", hex_fingerprint(optimizer_fingerprint(optimizer))));
  result.samples_per_s =
      train_time > 0 ? static_cast<double>(trained_steps * global_batch) / train_time : 0.0;
  return result;
}

}  // namespace ddptrain
