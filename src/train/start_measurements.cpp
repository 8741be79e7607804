#include "train/start_measurements.h"

#include "ddp/bucket_size.h"
#include "ddp/fully_sharded.h"
#include "obs/kernel_probe.h"
#include "obs/logger.h"
#include "obs/memory.h"
#include "train/trainable.h"

namespace ddptrain {
namespace {

// Every rank must train in the same precision, so the choice is made from the rates averaged
// over all ranks (each rank computes the same choice from the same sums), and on CUDA from
// whether every GPU has bf16. Whether to reduce depends only on the options, the device type
// and the checkpoint resumed: every rank joins the all-reduce, or none does.
Precision agreed_precision(PrecisionRequest req, const DistContext& ctx, CpuKernelRates rates) {
  const bool measured =
      ctx.device().is_cpu() && req.use_amp && req.amp_dtype == AmpDtype::kAuto && req.resumed.empty();
  if (measured && ctx.communicates()) {
    std::vector<at::Tensor> sums{
        at::tensor({rates.conv_fp32, rates.matmul_fp32, rates.conv_bf16, rates.matmul_bf16}, at::kDouble)};
    ctx.all_reduce_sum(sums, "kernel-probe all_reduce (amp_dtype=auto)");
    const at::Tensor mean = sums[0] / ctx.world_size();
    rates = {mean[0].item<double>(), mean[1].item<double>(), mean[2].item<double>(), mean[3].item<double>()};
  }
  // On CUDA, bf16 only where every rank's GPU has it (a job of mixed GPUs): a rank in fp16 with
  // the loss scaler beside one in bf16 would average scaled and unscaled gradients.
  bool cuda_bf16 = cuda_has_bf16(ctx.device());
  if (ctx.device().is_cuda() && req.use_amp && req.amp_dtype == AmpDtype::kAuto && ctx.communicates()) {
    std::vector<at::Tensor> lacking{at::tensor({cuda_bf16 ? 0.0 : 1.0}, at::kDouble)};
    ctx.all_reduce_sum(lacking, "whether every GPU has bf16 (amp_dtype=auto)");
    const auto without = static_cast<int64_t>(lacking[0].item<double>());
    if (cuda_bf16 && without > 0)
      ctx.log().warn(str(without, " of the ", ctx.world_size(),
                         " ranks' GPUs have no bf16: every rank trains as they do"));
    cuda_bf16 = without == 0;
  }
  Precision p = choose_precision(req, ctx.device(), cuda_bf16, rates);
  if (measured && ctx.world_size() > 1) p.why += str(" (rates averaged over ", ctx.world_size(), " ranks)");
  return p;
}

}  // namespace

StartMeasurements measure_start(const TrainerOptions& o, const DistContext& ctx, int64_t flops_per_sample,
                                const std::string& resumed_precision, bool convolutional) {
  const PrecisionRequest req{{o.precision}, resumed_precision};
  const bool amp_auto = req.use_amp && req.amp_dtype == AmpDtype::kAuto;
  const bool wants_peak = flops_per_sample > 0 && o.report.peak_tflops <= 0;
  const bool probe = ctx.device().is_cpu() && (wants_peak || amp_auto);
  StartMeasurements m;
  m.peak_bytes_before_probe = memory_stats(ctx.device()).peak_bytes;
  const CpuKernelRates rates =
      probe ? probe_cpu_kernels(req.use_amp && req.amp_dtype != AmpDtype::kFp16) : CpuKernelRates{};
  if (probe) reset_peak_memory(ctx.device());
  m.precision = agreed_precision(req, ctx, rates);
  ctx.log().info("precision: " + m.precision.why);
  const PrecisionOptions defaults;
  if (!m.precision.grad_scaler && (o.precision.scaler_init_scale != defaults.scaler_init_scale ||
                                   o.precision.scaler_growth_interval != defaults.scaler_growth_interval))
    ctx.log().warn(
        str("the loss scaler's settings (precision.scaler_init_scale, precision.scaler_growth_interval; "
            "--scaler_init_scale, --scaler_growth_interval) are ignored: this run has no loss scaler (",
            m.precision.name(), "; precision.grad_scaler on, --grad_scaler on, forces one)"));
  if (flops_per_sample <= 0) return m;  // no MFU, no backward estimate
  m.peak = peak_flops(ctx.device(), m.precision.autocast, o.report.peak_tflops, rates, convolutional);
  ctx.log().info(str("model FLOPs: ", static_cast<double>(flops_per_sample) / 1e9,
                     " GFLOP per training sample; peak for MFU: ", m.peak.source));
  // Backward is about 2/3 of a step's FLOPs; at the peak rate this underestimates it, which
  // only makes the bucket size choice more careful about the number of buckets.
  if (m.peak.flops_per_s > 0)
    m.backward_s = 2.0 / 3.0 * static_cast<double>(flops_per_sample) * o.data.batch_size / m.peak.flops_per_s;
  return m;
}

DdpSetup ddp_setup(const TrainerOptions& o, const DistContext& ctx, const torch::nn::Module& module,
                   const Units* units, double backward_s) {
  DdpSetup d;
  std::vector<at::Tensor> trainable;
  for (const auto& p : unique_parameters(module))
    if (p.requires_grad()) trainable.push_back(p);
  if (o.ddp.bucket_cap_mb) {
    d.reducer.bucket_cap_bytes = static_cast<size_t>(*o.ddp.bucket_cap_mb * (1 << 20));
  } else if (ctx.communicates() && ctx.world_size() > 1) {
    int64_t grad_bytes = 0;
    for (const auto& p : trainable) grad_bytes += p.numel() * static_cast<int64_t>(p.element_size());
    const BucketCapChoice c = agreed_bucket_cap(ctx, grad_bytes, backward_s);
    ctx.log().info(c.why);
    d.reducer.bucket_cap_bytes = c.cap_bytes;
  }
  d.reducer.first_bucket_bytes = static_cast<size_t>(o.ddp.first_bucket_mb * (1 << 20));
  d.reducer.gradient_as_bucket_view = o.ddp.gradient_as_bucket_view;
  d.reducer.find_unused_parameters = o.ddp.find_unused_parameters;
  d.reducer.comm_hook = o.ddp.comm_hook;
  d.reducer.overlap = o.ddp.overlap;
  d.reducer.shard_gradients = o.zero.stage >= 2 && ctx.communicates();
  if (o.zero.stage >= 3 && ctx.communicates()) {  // Note [ZeRO stage 3]: one bucket per unit
    if (units) check_unit_parameters_stay_in_their_units(module, *units);
    d.reducer.buckets = unit_buckets(trainable, units);
    d.backward_has_collectives = true;  // the units' gathers
  }
  d.broadcast_buffers = o.ddp.broadcast_buffers;
  return d;
}

}  // namespace ddptrain
