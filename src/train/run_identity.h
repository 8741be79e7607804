// RunIdentity: what defines a training run, recorded in every checkpoint so that a resume
// continues the same run and nothing else. No LibTorch here.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace ddptrain {

/// Note [Run identity]
/// A checkpoint records what defines its run (TrainerOptions::run_identity: names and values
/// as text, whatever the program says defines it; `ddptrain train` records every flag except
/// the ones a resume may change, config/run_identity.h). A resume continues only the same run:
/// checkpoint.resume_from "auto" takes this run's newest valid checkpoint, and an explicit
/// resume_from of another run, auto finding only other runs' checkpoints, and a new run into a
/// checkpoint.dir holding another run's checkpoints are usage errors naming the entries that
/// differ (choose_resume_checkpoint, train/resume.h). An entry the checkpoint does not record
/// (one written before it was added) is not compared, so a checkpoint written before
/// identities were recorded matches any run.
using RunIdentity = std::map<std::string, std::string>;  // name -> value as text

/// "lr 0.05 (the checkpoint's: 0.01)" for each entry whose values differ, the name after
/// `name_prefix` ("--" for flags) unless it is a phrase (holds a space); empty when the runs
/// match.
std::vector<std::string> identity_differences(const RunIdentity& mine, const RunIdentity& theirs,
                                              const std::string& name_prefix = "");

}  // namespace ddptrain
