// Fault injection for the failure tests: the tests set environment variables, production
// runs never do. Read once into a value at start (no global state).
//   DDPTRAIN_FAULT_KILL_AT_STEP=N   the rank in DDPTRAIN_FAULT_RANK (default 0) SIGKILLs
//                                   itself right after optimizer step N;
//   DDPTRAIN_FAULT_THROW_AT_STEP=N  ... throws an error there instead;
//   DDPTRAIN_FAULT_HANG_AT_STEP=N   ... hangs there (sleeps forever, ignoring SIGTERM);
//   DDPTRAIN_FAULT_HANG_RANK=R      the rank that hangs, when another than DDPTRAIN_FAULT_RANK's
//                                   (one rank hangs while another throws);
//   DDPTRAIN_FAULT_STALL_AT_STEP=N@FILE  ... stops there until a signal ends it (SIGTERM's default
//                                   action), once: it creates FILE and stalls only where FILE
//                                   was not there (an attempt that repeats step N goes on);
//   DDPTRAIN_FAULT_NAN_AT_STEP=N    ... makes its loss NaN in the micro-batches of step N;
//   DDPTRAIN_FAULT_MISMATCH_AT_STEP=N ... issues a broadcast the others do not before step N's
//                                   first forward (ranks disagree on a collective);
//   DDPTRAIN_FAULT_THROW_IN_EVAL=E  ... throws an error at the start of epoch E's evaluation;
//   DDPTRAIN_FAULT_TERM_IN_EVAL=E   ... sends itself SIGTERM there (a stop request during it);
//   DDPTRAIN_FAULT_KILL_IN_SAVE=STAGE@N  rank 0 SIGKILLs itself at STAGE of the checkpoint
//                                   save after step N (stages: checkpoint.h SaveOptions);
//   DDPTRAIN_FAULT_THROW_IN_SAVE=STAGE@N  rank 0 throws an error there instead;
//   DDPTRAIN_FAULT_SLOW_SAVE=S@N[@STAGE]  rank 0 sleeps S seconds once the files of the save
//                                   after step N are written (a slow file system), or at STAGE
//                                   of it (e.g. written:model.pt);
//   DDPTRAIN_FAULT_ATTEMPT=A        only in launch attempt A (TORCHELASTIC_RESTART_COUNT,
//                                   default 0); -1: in every attempt.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "util/env.h"
#include "util/error.h"

namespace ddptrain {

struct FaultPlan {
  int64_t kill_at_step = -1;
  int64_t throw_at_step = -1;
  int64_t hang_at_step = -1;
  int64_t stall_at_step = -1;
  std::string stall_file;
  int64_t nan_at_step = -1;
  int64_t mismatch_at_step = -1;
  int64_t throw_in_eval_epoch = -1;
  int64_t term_in_eval_epoch = -1;
  std::string kill_in_save_stage;
  int64_t kill_in_save_step = -1;
  std::string throw_in_save_stage;
  int64_t throw_in_save_step = -1;
  int64_t slow_save_s = 0;
  int64_t slow_save_step = -1;
  std::string slow_save_stage = "files_written";
  int rank = 0;
  int hang_rank = 0;

  /// A variable's STAGE@N into stage and step (left as they are when it is unset).
  static void stage_at_step(const char* name, std::string& stage, int64_t& step) {
    const std::string v = env::get(name).value_or("");
    if (const auto at = v.find('@'); at != std::string::npos) {
      stage = v.substr(0, at);
      step = std::stoll(v.substr(at + 1));
    }
  }

  static FaultPlan from_env() {
    FaultPlan f;
    const long long attempt = env::get_int("DDPTRAIN_FAULT_ATTEMPT", -1, 1 << 20).value_or(0);
    const long long current = env::get_int("TORCHELASTIC_RESTART_COUNT", 0, 1 << 30).value_or(0);
    if (attempt != -1 && attempt != current) return f;
    f.kill_at_step = env::get_int("DDPTRAIN_FAULT_KILL_AT_STEP", 0, INT64_MAX).value_or(-1);
    f.throw_at_step = env::get_int("DDPTRAIN_FAULT_THROW_AT_STEP", 0, INT64_MAX).value_or(-1);
    f.nan_at_step = env::get_int("DDPTRAIN_FAULT_NAN_AT_STEP", 0, INT64_MAX).value_or(-1);
    f.mismatch_at_step = env::get_int("DDPTRAIN_FAULT_MISMATCH_AT_STEP", 0, INT64_MAX).value_or(-1);
    f.throw_in_eval_epoch = env::get_int("DDPTRAIN_FAULT_THROW_IN_EVAL", 1, INT64_MAX).value_or(-1);
    f.term_in_eval_epoch = env::get_int("DDPTRAIN_FAULT_TERM_IN_EVAL", 1, INT64_MAX).value_or(-1);
    f.hang_at_step = env::get_int("DDPTRAIN_FAULT_HANG_AT_STEP", 0, INT64_MAX).value_or(-1);
    const std::string stall = env::get("DDPTRAIN_FAULT_STALL_AT_STEP").value_or("");
    if (!stall.empty()) {
      const auto at = stall.find('@');
      if (at == std::string::npos || at + 1 == stall.size())
        throw Error("DDPTRAIN_FAULT_STALL_AT_STEP takes N@FILE, not '" + stall + "'");
      f.stall_at_step = std::stoll(stall.substr(0, at));
      f.stall_file = stall.substr(at + 1);
    }
    stage_at_step("DDPTRAIN_FAULT_KILL_IN_SAVE", f.kill_in_save_stage, f.kill_in_save_step);
    stage_at_step("DDPTRAIN_FAULT_THROW_IN_SAVE", f.throw_in_save_stage, f.throw_in_save_step);
    const std::string slow = env::get("DDPTRAIN_FAULT_SLOW_SAVE").value_or("");
    if (const auto at = slow.find('@'); at != std::string::npos) {
      f.slow_save_s = std::stoll(slow.substr(0, at));
      const auto stage = slow.find('@', at + 1);
      f.slow_save_step =
          std::stoll(slow.substr(at + 1, stage == std::string::npos ? std::string::npos : stage - at - 1));
      if (stage != std::string::npos) f.slow_save_stage = slow.substr(stage + 1);
    }
    f.rank = static_cast<int>(env::get_int("DDPTRAIN_FAULT_RANK", 0, 1 << 20).value_or(0));
    f.hang_rank = static_cast<int>(env::get_int("DDPTRAIN_FAULT_HANG_RANK", 0, 1 << 20).value_or(f.rank));
    return f;
  }
  /// Called after each optimizer step.
  void after_step(int rank, int64_t global_step) const {
    if (rank == this->rank && global_step == kill_at_step) ::kill(::getpid(), SIGKILL);
    if (rank == this->rank && global_step == throw_at_step)
      throw Error(detail::concat("injected fault (DDPTRAIN_FAULT_THROW_AT_STEP) after step ", global_step));
    std::FILE* once = nullptr;  // made here: the stall's one time (an unwritable FILE: none)
    if (rank == this->rank && global_step == stall_at_step && ::access(stall_file.c_str(), F_OK) != 0 &&
        (once = std::fopen(stall_file.c_str(), "w")) != nullptr) {
      std::fclose(once);
      ::signal(SIGTERM, SIG_DFL);
      ::signal(SIGINT, SIG_DFL);
      for (;;) ::pause();
    }
    if (rank == hang_rank && global_step == hang_at_step) {
      ::signal(SIGTERM, SIG_IGN);
      ::signal(SIGINT, SIG_IGN);
      for (;;) ::pause();
    }
  }
  /// Whether this rank's loss is poisoned in the micro-batches of optimizer step `step`.
  bool poison_loss(int rank, int64_t step) const { return rank == this->rank && step == nan_at_step; }
  /// Whether this rank issues a collective of its own before step `step`'s first forward.
  bool extra_collective(int rank, int64_t step) const {
    return rank == this->rank && step == mismatch_at_step;
  }
  /// Called before each evaluation.
  void in_evaluation(int rank, int64_t epoch) const {
    if (rank == this->rank && epoch == term_in_eval_epoch) ::kill(::getpid(), SIGTERM);
    if (rank == this->rank && epoch == throw_in_eval_epoch)
      throw Error(
          detail::concat("injected fault (DDPTRAIN_FAULT_THROW_IN_EVAL) in epoch ", epoch, "'s evaluation"));
  }
  /// Called by rank 0 at each stage of a checkpoint save.
  void in_save(int64_t global_step, const char* stage) const {
    if (global_step == kill_in_save_step && kill_in_save_stage == stage) ::kill(::getpid(), SIGKILL);
    if (global_step == throw_in_save_step && throw_in_save_stage == stage)
      throw Error(detail::concat("injected fault (DDPTRAIN_FAULT_THROW_IN_SAVE) at ", stage, " after step ",
                                 global_step));
    if (global_step == slow_save_step && slow_save_stage == stage) {
      std::fprintf(stderr, "injected fault: a save that takes %lld s more\n",
                   static_cast<long long>(slow_save_s));
      ::sleep(static_cast<unsigned>(slow_save_s));
    }
  }
};

}  // namespace ddptrain
