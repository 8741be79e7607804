// The built-in language models from and to Hugging Face folders, for a library program: what
// `ddptrain train --init_from_hf DIR` and `ddptrain export --format hf` do, as three calls.
//   ddptrain::ModelOptions o = ddptrain::hf_model_options("gpt2-folder");   // gpt or llama
//   auto model = ddptrain::build_model(o, my_tokens.shape());              // models/build_model.h
//   ddptrain::load_hf_weights(*model, "gpt2-folder", ctx->log());
//   ... train it (Trainer) ...
//   if (ctx->is_main()) ddptrain::save_hf_folder(*model, o, "out-folder"); // transformers loads it
// A folder is config.json and model.safetensors, or its shards with model.safetensors.index.json
// (GPT2LMHeadModel; LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM).
#pragma once

#include <cstdint>
#include <string>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "models/model_options.h"
#include "obs/logger.h"

namespace ddptrain {

/// The options of the model a Hugging Face folder holds, from its config.json: model gpt for
/// GPT-2, llama for the Llama family, with the folder's sizes, vocabulary, eps, rope and ties.
/// UsageError naming the file and the field for what ddptrain does not read.
ModelOptions hf_model_options(const std::string& dir);

/// The folder's weights written into `model`, built by build_model from hf_model_options(dir):
/// every tensor checked against it (name, shape, dtype) and read straight into its parameter.
/// UsageError naming the file and the tensor for one that does not fit, or that is missing.
void load_hf_weights(torch::nn::Module& model, const std::string& dir, const Logger& log);

/// `model` (a gpt or llama built from `o`, with whole parameters: under ZeRO stage 3, after the
/// Trainer's fit() returns) as a Hugging Face folder that transformers' from_pretrained loads:
/// config.json, and model.safetensors or its shards above max_shard_bytes; floating tensors in
/// `dtype` (kFloat or kBFloat16). The folder's other files (a tokenizer's) stay; an earlier
/// export there is replaced once the new one is written whole. One process writes a folder:
/// call it on rank 0 only (two would delete and rename each other's staged files).
void save_hf_folder(const torch::nn::Module& model, const ModelOptions& o, const std::string& dir,
                    at::ScalarType dtype = at::kFloat, int64_t max_shard_bytes = int64_t{5000} << 20);

}  // namespace ddptrain
