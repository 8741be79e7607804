#include "train/step_report.h"

#include <cmath>
#include <cstdio>

#include "obs/logger.h"

namespace ddptrain {
namespace {

double mib(double bytes) { return bytes / (1 << 20); }

}  // namespace

std::string with_commas(double v) {
  std::string s = std::to_string(static_cast<long long>(std::llround(v)));
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

std::string format_step_line(const StepReport& r) {
  std::string extra;
  if (r.loss_scale > 0) extra += str(" | loss scale ", r.loss_scale);
  if (r.grad_norm >= 0) extra += str(" | grad norm ", fmt("%.3f", r.grad_norm));
  if (r.has_peak) extra += str(" | MFU ", fmt("%.1f", 100 * r.mfu), "%");
  if (r.mem.peak_bytes >= 0)
    extra += str(" | peak mem ", fmt("%.0f", mib(static_cast<double>(r.mem.peak_bytes))), " MiB");
  extra += str(" | state MiB: params ", fmt("%.1f", r.param_mib),
               r.param_peak_mib >= 0 ? str(" (peak ", fmt("%.1f", r.param_peak_mib), ")") : std::string(),
               " grads ", fmt("%.1f", r.grad_mib), " optim ", fmt("%.1f", r.optim_mib));
  return str("epoch ", r.epoch, " step ", r.step_in_epoch, "/", r.steps_per_epoch, " | global step ",
             r.global_step, "/", r.last_step, " | loss ", fmt("%.4f", r.loss), " | lr ", fmt("%.3e", r.lr),
             " | ", with_commas(r.samples_per_s), " samples/s | ",
             r.tokens_per_sample > 0
                 ? with_commas(r.samples_per_s * static_cast<double>(r.tokens_per_sample)) + " tokens/s | "
                 : std::string(),
             fmt("%.0f", 1000 * r.seconds / r.steps), " ms/step | ",
             fmt("%.0f", static_cast<double>(r.comm.allreduces) / r.steps), " all-reduce ",
             fmt("%.2f", mib(static_cast<double>(r.comm.bytes)) / r.steps), " MiB/step, comm wait ",
             fmt("%.1f", 1000 * r.comm.wait_s / r.steps), " ms/step", extra,
             StepTimer::format(r.phases, r.steps));
}

nlohmann::json step_record(const StepReport& r) {
  nlohmann::json rec = {{"loss", r.loss},
                        {"lr", r.lr},
                        {"samples_per_s", r.samples_per_s},
                        {"ms_per_step", 1000 * r.seconds / r.steps},
                        {"allreduces_per_step", static_cast<double>(r.comm.allreduces) / r.steps},
                        {"allreduce_mib_per_step", mib(static_cast<double>(r.comm.bytes)) / r.steps},
                        {"comm_wait_ms", 1000 * r.comm.wait_s / r.steps}};
  // Only what was measured: no MFU without a known peak (a GPU missing from the table, no
  // --peak_tflops), no peak memory where the device counts none (a 0 or -1 would plot as one).
  if (r.has_peak) rec["mfu"] = r.mfu;
  if (r.mem.peak_bytes >= 0) rec["peak_mem_mib"] = mib(static_cast<double>(r.mem.peak_bytes));
  rec["data_wait_share"] = StepTimer::data_share(r.phases);
  if (r.tokens_per_sample > 0)
    rec["tokens_per_s"] = r.samples_per_s * static_cast<double>(r.tokens_per_sample);
  for (int p = 0; p < StepTimer::kNumPhases; ++p)
    rec[str(StepTimer::name(static_cast<StepTimer::Phase>(p)), "_ms")] =
        1000 * r.phases[static_cast<size_t>(p)] / r.steps;
  if (r.checkpoint_s > 0) rec["checkpoint_s"] = r.checkpoint_s;
  if (r.loss_scale > 0) rec["loss_scale"] = r.loss_scale;
  if (r.grad_norm >= 0) rec["grad_norm"] = r.grad_norm;
  rec["param_mib"] = r.param_mib;
  rec["grad_mib"] = r.grad_mib;
  rec["optim_mib"] = r.optim_mib;
  if (r.param_peak_mib >= 0) rec["param_peak_mib"] = r.param_peak_mib;
  return rec;
}

}  // namespace ddptrain
