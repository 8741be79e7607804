// A file of initial weights (--init_from): a Python torch.save(model.state_dict()) file, a
// safetensors file (ours from `ddptrain export`, or Hugging Face's), with the "module."
// prefix of a state_dict saved from a DDP-wrapped model removed (read_weights_file); or a
// Hugging Face folder of GPT-2 or the Llama family (config.json + safetensors:
// checkpoint/hf_folder.h), read into the model's parameters (HfInitialWeights).
#pragma once

#include <chrono>
#include <memory>
#include <set>
#include <string>

#include <torch/nn/module.h>

#include "models/hf_plan.h"
#include "obs/logger.h"
#include "serialize/python_pickle.h"

namespace ddptrain {

/// The {name: tensor} pairs of the file at path, read by its format (safetensors or a
/// torch.save pickle). When every name starts with "module." (torch.save of a DDP model's
/// state_dict), the prefix is removed, as PyTorch's consume_prefix_in_state_dict_if_present
/// does, and log says so.
NamedTensors read_weights_file(const std::string& path, const Logger& log);

/// A Hugging Face folder's weights written into a model's own parameters, a part at a time
/// (models/hf_plan.h): each tensor read straight into its parameter where dtype and layout
/// allow, so no second copy of the model exists; under ZeRO-3 a unit's as it is built (Note
/// [Units sharded as built]).
class HfInitialWeights {
 public:
  /// Reads config.json and every file's header, and checks them against the model they
  /// describe. UsageError naming the file for what does not fit.
  HfInitialWeights(const std::string& dir, const Logger& log);
  ~HfInitialWeights();
  /// Writes the parameters of `module` (named prefix + their names in it) not written yet.
  void fill(torch::nn::Module& module, const std::string& prefix = "");
  /// Checks that every tensor of the folder was written, and logs what was read and how fast.
  void finish();

 private:
  std::string dir_;
  const Logger& log_;
  std::unique_ptr<TensorSource> source_;
  HfPlan plan_;
  std::set<std::string> filled_;
  int64_t bytes_ = 0;
  double seconds_ = 0;  // opening the folder and reading it (not the model's build between)
};

}  // namespace ddptrain
