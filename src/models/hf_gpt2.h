// GPT-2 as Hugging Face's transformers holds it (GPT2LMHeadModel, config.json model_type
// "gpt2"), in and out of ddptrain's Gpt, which has GPT-2's shape and names:
//  - config.json -> the GPT sizes (n_layer, n_head, n_embd, n_positions = block_size,
//    vocab_size) and the activation (gelu_new and gelu_pytorch_tanh: GELU's tanh form; gelu:
//    the exact one). A field whose value Gpt does not compute (an n_inner other than
//    4·n_embd, untied embeddings, cross-attention, attention scaled by the layer index,
//    another layer_norm_epsilon than 1e-5, another activation) is a UsageError naming it.
//    The config's dropouts (resid_pdrop, ...) are transformers' training settings, not the
//    architecture: ddptrain's dropout is ModelOptions::dropout.
//  - weights: transformers' names without the "transformer." prefix are Gpt's; its Conv1D
//    weights (in, out) are Linear's (out, in) transposed; the causal-mask buffers older files
//    hold (attn.bias, attn.masked_bias) are dropped; lm_head.weight, when a file holds it, must
//    equal wte.weight (tied). Every tensor's shape is checked against the config's sizes.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "models/gpt.h"
#include "models/hf_plan.h"
#include "models/model_options.h"
#include "serialize/python_pickle.h"

namespace ddptrain {

/// Sets o's GPT sizes and activation from a GPT-2 config.json (origin: its path, for
/// messages). OptionError naming the field when o already sets a size to another value;
/// UsageError naming the config's field for what Gpt does not compute.
void apply_hf_gpt2_config(const nlohmann::json& config, const std::string& origin, ModelOptions& o);

/// Gpt's parameter names and shapes for config c, in its state_dict order, without building it.
std::vector<std::pair<std::string, std::vector<int64_t>>> gpt_layout(const GptConfig& c);

/// Where each of Gpt's tensors comes from among a GPT2LMHeadModel's stored ones (their
/// headers): renamed, Conv1D weights transposed, lm_head.weight tied to wte.weight. UsageError
/// naming origin and the tensor for one missing, one unexpected, or a shape or dtype that does
/// not fit `c`.
HfPlan gpt_hf_plan(const std::vector<StoredTensor>& stored, const GptConfig& c, const std::string& origin);

/// A GPT2LMHeadModel's tensors (from read_hf_tensors) as Gpt's state: renamed, transposed,
/// converted to float32. UsageError naming origin and the tensor for one missing, one
/// unexpected, or a shape that does not fit `c`.
NamedTensors gpt_from_hf(const NamedTensors& hf, const GptConfig& c,
                         const std::string& origin);  // in Gpt's order

/// Gpt's state as GPT2LMHeadModel's save_pretrained writes it ("transformer." names, Conv1D
/// layout, no lm_head.weight: it is tied).
NamedTensors gpt_to_hf(const NamedTensors& ours);

/// The config.json transformers reads for a Gpt of config c whose tensors are `dtype`
/// ("float32" or "bfloat16", transformers' words).
std::string hf_gpt2_config_json(const GptConfig& c, const std::string& dtype = "float32");

}  // namespace ddptrain
