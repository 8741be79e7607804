// A Hugging Face model folder's architecture, whichever ddptrain model holds it: config.json's
// model_type picks models/hf_gpt2 (gpt2 -> --model gpt) or models/hf_llama (llama, qwen2,
// mistral -> --model llama); these functions dispatch on it, or on ModelOptions::model.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "models/hf_plan.h"
#include "models/model_options.h"
#include "serialize/python_pickle.h"

namespace ddptrain {

/// Sets o's model and its fields from config.json (origin: its path, for messages). The model
/// is the config's when o's is the default (mini_resnet); another built-in model is an
/// OptionError naming model and init_from_hf. UsageError naming the config's model_type when
/// ddptrain reads no such model.
void apply_hf_config(const nlohmann::json& config, const std::string& origin, ModelOptions& o);

/// Where each tensor of o's model (o as apply_hf_config set it) comes from among a folder's
/// stored tensors (their headers): see gpt_hf_plan and llama_hf_plan. A padded vocabulary's
/// extra rows are fill_from_hf's to zero.
HfPlan hf_weight_plan(const std::vector<StoredTensor>& stored, const ModelOptions& o,
                      const std::string& origin);

/// A folder's tensors as the state of o's model (o as apply_hf_config set it).
NamedTensors model_from_hf(const NamedTensors& hf, const ModelOptions& o, const std::string& origin);

/// o's model's state (gpt or llama) as transformers names and lays it out.
NamedTensors model_to_hf(const NamedTensors& ours, const ModelOptions& o);

/// The config.json for o's model with tensors of `dtype` ("float32" or "bfloat16").
std::string hf_config_json(const ModelOptions& o, const std::string& dtype);

/// The architecture's name for the log: "GPT-2", "Llama", "Qwen2" (by the biases).
std::string hf_architecture(const ModelOptions& o);

}  // namespace ddptrain
