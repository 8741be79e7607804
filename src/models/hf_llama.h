// The Llama family as Hugging Face's transformers holds it (LlamaForCausalLM, Qwen2ForCausalLM,
// MistralForCausalLM; config.json model_type "llama", "qwen2", "mistral"), in and out of
// ddptrain's Llama, whose parameter names are transformers' without "model.":
//  - config.json -> the sizes (num_hidden_layers, num_attention_heads, num_key_value_heads,
//    hidden_size, intermediate_size, vocab_size, max_position_embeddings = max_positions, and
//    block_size too unless the run sets a shorter window), rope_theta (transformers 5's
//    rope_parameters, or the older top-level rope_theta), rms_norm_eps, tie_word_embeddings,
//    and the biases: Llama's attention_bias (q/k/v/o), Qwen2's q/k/v (always). What Llama
//    does not compute is a UsageError naming the field: another activation than silu, MLP
//    biases, a head_dim other than hidden_size / num_attention_heads, scaled rotary
//    embeddings (rope_type other than default), a partial rotation (partial_rotary_factor:
//    transformers 4 rotates part, 5 all), a sliding window shorter than the training window.
//    pretraining_tp (4's matmuls split in slices: the same product) is not read.
//    attention_dropout is a training setting, not the architecture (ModelOptions::dropout).
//  - weights: "model." names are Llama's without the prefix, lm_head.weight is lm_head's
//    (when tied, a file's lm_head.weight must equal the embedding); the rotary inv_freq
//    buffers older files hold are dropped. Every tensor's shape is checked against the
//    config's sizes, before any is converted.
//  - out: LlamaForCausalLM, Qwen2ForCausalLM for q/k/v biases (Llama's config has no such
//    choice), MistralForCausalLM for a Mistral's sliding window (ModelOptions::sliding_window:
//    beyond it transformers' Mistral attends within the window, as the imported model did); a
//    Qwen2 whose layers slide keeps its window and its first sliding layer (max_window_layers).
//    max_position_embeddings comes back as it came in (a window does not shorten it).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/hf_plan.h"
#include "models/llama.h"
#include "models/model_options.h"
#include "serialize/python_pickle.h"

namespace ddptrain {

/// Sets o's Llama fields from a llama, qwen2 or mistral config.json (origin: its path, for
/// messages). OptionError naming the field when o already sets it to another value;
/// UsageError naming the config's field for what Llama does not compute.
void apply_hf_llama_config(const nlohmann::json& config, const std::string& origin, ModelOptions& o);

/// Llama's parameter names and shapes for config c, in its state_dict order, without building
/// it (a loader checks a folder against this before it allocates anything).
std::vector<std::pair<std::string, std::vector<int64_t>>> llama_layout(const LlamaConfig& c);

/// Where each of Llama's tensors comes from among a LlamaForCausalLM's (or Qwen2's, Mistral's)
/// stored ones (their headers). UsageError naming origin and the tensor for one missing, one
/// unexpected, or a shape or dtype that does not fit `c`.
HfPlan llama_hf_plan(const std::vector<StoredTensor>& stored, const LlamaConfig& c,
                     const std::string& origin);

/// A LlamaForCausalLM's (or Qwen2's, Mistral's) tensors as Llama's state: renamed, converted to
/// float32, in Llama's order. UsageError naming origin and the tensor for one missing, one
/// unexpected, or a shape that does not fit `c`.
NamedTensors llama_from_hf(const NamedTensors& hf, const LlamaConfig& c, const std::string& origin);

/// Llama's state as save_pretrained writes it ("model." names; no lm_head.weight when tied).
NamedTensors llama_to_hf(const NamedTensors& ours);

/// The config.json transformers reads for a Llama of config c whose tensors are `dtype`
/// ("float32" or "bfloat16"): Qwen2's for q/k/v biases, else Llama's.
std::string hf_llama_config_json(const LlamaConfig& c, const std::string& dtype = "float32");

}  // namespace ddptrain
