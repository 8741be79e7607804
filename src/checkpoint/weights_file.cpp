#include "checkpoint/weights_file.h"

#include <algorithm>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_folder.h"
#include "models/build_model.h"
#include "models/hf_model.h"
#include "serialize/safetensors.h"
#include "serialize/state_dict_reader.h"

namespace ddptrain {

namespace {

// A safetensors file tensor by tensor, straight into each tensor (no copy of the file held).
NamedTensors read_safetensors_file(const std::string& path) {
  const SafetensorsFile file(path);
  NamedTensors out;
  for (const SafetensorsEntry& e : file.entries()) out.emplace_back(e.name, file.read(e));
  return out;
}

}  // namespace

NamedTensors read_weights_file(const std::string& path, const Logger& log) {
  NamedTensors tensors =
      is_safetensors_file(path) ? read_safetensors_file(path) : unpickle_tensors(read_file(path), path);
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

HfInitialWeights::HfInitialWeights(const std::string& dir, const Logger& log) : dir_(dir), log_(log) {
  const auto start = std::chrono::steady_clock::now();
  ModelOptions sizes;
  const nlohmann::json config = read_hf_config(dir);
  apply_hf_config(config, dir + "/config.json", sizes);
  log.info(str(dir, ": a Hugging Face ", hf_architecture(sizes), " (", sizes.n_layer, " layers, ",
               sizes.n_embd, " wide)"));
  // transformers applies these in train mode (GPT-2's are 0.1): training settings, not the
  // architecture, so the run's own dropout (--dropout, ModelOptions::dropout) is what applies.
  std::string dropouts;
  for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout"})
    if (config.contains(key) && config[key].is_number() && config[key].get<double>() > 0)
      dropouts += str(dropouts.empty() ? "" : ", ", key, " ", config[key].get<double>());
  if (!dropouts.empty())
    log.info(str(dir, "/config.json's dropouts (", dropouts, ") are transformers' training settings and are ",
                 "not applied: the run's dropout is --dropout's (ModelOptions::dropout)"));
  source_ = std::make_unique<HfFolderTensors>(dir);
  plan_ = hf_weight_plan(source_->tensors(), sizes, dir);
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

HfInitialWeights::~HfInitialWeights() = default;

void HfInitialWeights::fill(torch::nn::Module& module, const std::string& prefix) {
  const auto start = std::chrono::steady_clock::now();
  for (const auto& item : module.named_parameters()) {
    const std::string name = prefix + item.key();
    if (filled_.count(name) != 0) continue;
    DDP_USAGE_CHECK(plan_.find(name) != nullptr, "'", dir_, "' has no weights for the model's parameter '",
                    name, "'");
    fill_from_hf(*source_, plan_, name, item.value());
    filled_.insert(name);
    bytes_ += static_cast<int64_t>(item.value().nbytes());
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void HfInitialWeights::finish() {
  for (const auto& [name, s] : plan_.tensors)
    DDP_USAGE_CHECK(filled_.count(name) != 0, "'", dir_, "': tensor '", s.stored,
                    "' has no parameter in the model built (", name, ")");
  log_.info(str("initial weights from ", dir_, " (", filled_.size(), " tensors, ", bytes_ >> 20,
                " MiB of weights read in ", static_cast<int64_t>(seconds_ * 1000),
                " ms, into the parameters)"));
}

}  // namespace ddptrain
