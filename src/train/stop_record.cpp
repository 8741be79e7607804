#include "train/stop_record.h"

#include "util/error_file.h"
#include "util/strings.h"

namespace ddptrain {

int stop_exit_code(const TrainResult& r, const DistContext& ctx) {
  if (r.stopped_by_signal == 0) return 0;
  const std::string by =
      r.stop_requested_by == ctx.rank() ? "" : str(" that rank ", r.stop_requested_by, " received");
  const std::string when = r.run_steps == 0 ? str("before its first step (at step ", r.global_step, ")")
                                            : str("after step ", r.global_step);
  write_error_file(str("[rank ", ctx.rank(), "/", ctx.world_size(), "] stopped ", when, " on ",
                       signal_name(r.stopped_by_signal), by,
                       r.last_checkpoint.empty() ? "" : "; its checkpoint: " + r.last_checkpoint),
                   {{"stop_signal", std::to_string(r.stopped_by_signal)}});
  return 128 + r.stopped_by_signal;
}

}  // namespace ddptrain
