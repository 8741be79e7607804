// The model named by the options (--model mini_resnet | gpt | llama | torchscript), sized for the data.
#pragma once

#include <memory>

#include "data/datasets.h"
#include "models/mini_resnet.h"
#include "models/model.h"

namespace ddptrain {

struct ModelOptions;
struct GptConfig;
struct LlamaConfig;

/// The GPT sizes: the preset, then the explicit flags (non-zero) over it.
GptConfig gpt_config(const ModelOptions& o);

/// The Llama sizes: the preset's layers, heads, width, block and vocabulary, then the explicit
/// flags (non-zero) over them, and llama's own fields.
LlamaConfig llama_config(const ModelOptions& o);

/// What the model needs of token data (block size and vocabulary); zeros for image models.
TokenSpec token_spec(const ModelOptions& o);

/// Whether the model's 4-d weights and images use the channels-last layout (--memory_format;
/// auto: yes for mini_resnet). See Note [Channels last].
bool uses_channels_last(const ModelOptions& o);

/// Puts every 4-d parameter and buffer of m into the channels-last layout, in place (the
/// same tensors: autograd hooks and optimizer references stay valid).
void to_channels_last(torch::nn::Module& m);

/// Builds the model from the RNG's current state (the caller seeds it). UsageError when the
/// data does not fit the model (a vocabulary larger than the model's). sink: gets each unit of
/// gpt and llama as it is built (Note [Units sharded as built]), and is no longer the model's
/// after; see takes_unit_sink.
std::shared_ptr<Model> build_model(const ModelOptions& o, const DatasetShape& data,
                                   NormFactory norm = default_norm, UnitSink* sink = nullptr);

/// Whether build_model hands o's model's units to a sink (gpt and llama).
bool takes_unit_sink(const ModelOptions& o);

}  // namespace ddptrain
