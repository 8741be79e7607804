// A file of initial weights (--init_from): a Python torch.save(model.state_dict()) file, a
// safetensors file (ours from `ddptrain export`, or Hugging Face's), with the "module."
// prefix of a state_dict saved from a DDP-wrapped model removed; or a Hugging Face folder of
// GPT-2 or the Llama family (config.json + safetensors: checkpoint/hf_folder.h), its weights
// as the model's (models/hf_model.h).
#pragma once

#include <string>

#include "obs/logger.h"
#include "serialize/python_pickle.h"

namespace ddptrain {

/// The {name: tensor} pairs of the file at path, read by its format (safetensors or a
/// torch.save pickle). When every name starts with "module." (torch.save of a DDP model's
/// state_dict), the prefix is removed, as PyTorch's consume_prefix_in_state_dict_if_present
/// does, and log says so.
NamedTensors read_weights_file(const std::string& path, const Logger& log);

}  // namespace ddptrain
