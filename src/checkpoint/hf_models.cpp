#include "checkpoint/hf_models.h"

#include "checkpoint/hf_folder.h"
#include "checkpoint/weights_file.h"
#include "models/hf_model.h"
#include "serialize/python_pickle.h"
#include "util/error.h"

namespace ddptrain {

ModelOptions hf_model_options(const std::string& dir) {
  DDP_USAGE_CHECK(
      is_hf_folder(dir), "'", dir, "' is not a Hugging Face model folder (config.json with ",
      "model.safetensors or its index; weights in another format, such as pytorch_model.bin, are not ",
      "read): save the model with save_pretrained(..., safe_serialization=True)");
  ModelOptions o;
  apply_hf_config(read_hf_config(dir), dir + "/config.json", o);
  o.init_from_hf = dir;
  return o;
}

void load_hf_weights(torch::nn::Module& model, const std::string& dir, const Logger& log) {
  HfInitialWeights weights(dir, log);
  weights.fill(model);
  weights.finish();
}

void save_hf_folder(const torch::nn::Module& model, const ModelOptions& o, const std::string& dir,
                    at::ScalarType dtype, int64_t max_shard_bytes) {
  DDP_USAGE_CHECK(o.model == ModelKind::kGpt || o.model == ModelKind::kLlama,
                  "save_hf_folder writes a gpt model (as GPT-2) or a llama (as Llama, Qwen2 or Mistral)");
  DDP_USAGE_CHECK(dtype == at::kFloat || dtype == at::kBFloat16, "save_hf_folder: dtype ", dtype,
                  " must be float32 or bfloat16");
  DDP_USAGE_CHECK(max_shard_bytes > 0, "save_hf_folder: max_shard_bytes=", max_shard_bytes, " must be > 0");
  write_hf_folder(dir, hf_config_json(o, dtype == at::kBFloat16 ? "bfloat16" : "float32"),
                  model_to_hf(state_dict(model), o), dtype, max_shard_bytes);
}

}  // namespace ddptrain
