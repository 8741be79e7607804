// The model named by the options (--model mini_resnet | gpt), sized for the data.
#pragma once

#include <memory>

#include "data/datasets.h"
#include "models/mini_resnet.h"
#include "models/model.h"

namespace ddptrain {

struct ModelOptions;
struct GptConfig;

/// The GPT sizes: the preset, then the explicit flags (non-zero) over it.
GptConfig gpt_config(const ModelOptions& o);

/// What the model needs of token data (block size and vocabulary); zeros for image models.
TokenSpec token_spec(const ModelOptions& o);

/// Builds the model from the RNG's current state (the caller seeds it). UsageError when the
/// data does not fit the model (a vocabulary larger than the model's).
std::shared_ptr<Model> build_model(const ModelOptions& o, const DatasetShape& data, NormFactory norm = default_norm);

}  // namespace ddptrain
