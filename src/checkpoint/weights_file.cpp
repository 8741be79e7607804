#include "checkpoint/weights_file.h"

#include <algorithm>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_folder.h"
#include "models/build_model.h"
#include "models/hf_model.h"
#include "serialize/safetensors.h"
#include "serialize/state_dict_reader.h"

namespace ddptrain {

NamedTensors read_weights_file(const std::string& path, const Logger& log) {
  if (is_hf_folder(path)) {
    ModelOptions sizes;
    apply_hf_config(read_hf_config(path), path + "/config.json", sizes);
    log.info(str(path, ": a Hugging Face ", hf_architecture(sizes), " (", sizes.n_layer, " layers, ",
                 sizes.n_embd, " wide)"));
    return model_from_hf(read_hf_tensors(path), sizes, path);
  }
  const std::string bytes = read_file(path);
  NamedTensors tensors =
      is_safetensors(bytes) ? read_safetensors(bytes, path) : unpickle_tensors(bytes, path);
  const std::string prefix = "module.";
  const bool wrapped = !tensors.empty() && std::all_of(tensors.begin(), tensors.end(), [&](const auto& nt) {
    return nt.first.rfind(prefix, 0) == 0;
  });
  if (wrapped) {
    for (auto& nt : tensors) nt.first.erase(0, prefix.size());
    log.info(str(path,
                 ": every name starts with \"module.\" (a state_dict of a DDP-wrapped model); the prefix is "
                 "removed"));
  }
  return tensors;
}

}  // namespace ddptrain
