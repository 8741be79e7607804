// A Hugging Face model folder, as `save_pretrained` writes one: config.json, and the weights
// in model.safetensors or, above its shard size, in model-00001-of-0000N.safetensors files
// that model.safetensors.index.json maps tensor by tensor. What the tensors mean is the
// model's (models/hf_gpt2.h); this layer reads and writes the files.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/hf_files.h"
#include "serialize/python_pickle.h"
#include "serialize/tensor_source.h"

namespace ddptrain {

/// config.json, parsed. UsageError naming the file when it is missing or not a JSON object.
nlohmann::json read_hf_config(const std::string& dir);

class SafetensorsFile;
struct SafetensorsEntry;

/// A folder's weights, read tensor by tensor: every file's header is read and checked at open
/// (against the index when sharded), a tensor's bytes when asked, straight into the caller's
/// memory by read_into. UsageError naming the file as read_hf_tensors says.
class HfFolderTensors : public TensorSource {
 public:
  explicit HfFolderTensors(const std::string& dir);
  ~HfFolderTensors() override;
  const std::vector<StoredTensor>& tensors() const override { return headers_; }
  at::Tensor read(const std::string& name) const override;
  void read_into(const std::string& name, const at::Tensor& dest) const override;

 private:
  std::pair<const SafetensorsFile*, const SafetensorsEntry*> find(const std::string& name) const;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<const SafetensorsFile*, const SafetensorsEntry*>> where_;
  std::vector<StoredTensor> headers_;
};

/// Every tensor of the folder's weights, as stored (sorted by name). UsageError naming the file
/// for: no weights file, a shard the index names that is missing, a tensor the index places in
/// a shard that lacks it (or a shard holding a tensor the index does not name), a file that is
/// not safetensors or is cut short.
NamedTensors read_hf_tensors(const std::string& dir);

/// Writes config_json and the tensors (converted to `dtype`) into dir, as save_pretrained
/// does: one model.safetensors up to max_shard_bytes, else shards of at most that size (a
/// larger tensor alone in its shard) and the index. Files are written atomically; dir is
/// created, and an earlier export's weight files in it are removed first. The metadata
/// {"format": "pt"} that transformers expects is set.
void write_hf_folder(const std::string& dir, const std::string& config_json, const NamedTensors& tensors,
                     at::ScalarType dtype, int64_t max_shard_bytes);

}  // namespace ddptrain
