// Tensors by name, read one at a time: a folder of safetensors files on disk
// (checkpoint/hf_folder.h) or tensors already in memory. A loader that reads each tensor
// straight into its destination (read_into) holds no second copy of the weights, and one that
// reads a model a part at a time holds only that part.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "serialize/python_pickle.h"
#include "util/error.h"

namespace ddptrain {

/// A stored tensor's header: its name, dtype and shape, without its bytes.
struct StoredTensor {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  /// Every tensor's header, sorted by name.
  virtual const std::vector<StoredTensor>& tensors() const = 0;
  /// Tensor `name` as stored (CPU, contiguous).
  virtual at::Tensor read(const std::string& name) const = 0;
  /// Tensor `name` written into dest: CPU, contiguous, of the stored dtype and element count.
  virtual void read_into(const std::string& name, const at::Tensor& dest) const = 0;
};

/// Tensors in memory as a TensorSource.
class TensorsInMemory : public TensorSource {
 public:
  explicit TensorsInMemory(const NamedTensors& tensors) {
    for (const auto& [name, t] : tensors) {
      by_name_[name] = t;
      headers_.push_back({name, t.scalar_type(), t.sizes().vec()});
    }
    std::sort(headers_.begin(), headers_.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  }
  const std::vector<StoredTensor>& tensors() const override { return headers_; }
  at::Tensor read(const std::string& name) const override { return find(name).cpu().contiguous(); }
  void read_into(const std::string& name, const at::Tensor& dest) const override { dest.copy_(find(name)); }

 private:
  const at::Tensor& find(const std::string& name) const {
    const auto it = by_name_.find(name);
    DDP_CHECK(it != by_name_.end(), "no tensor '", name, "'");
    return it->second;
  }
  std::map<std::string, at::Tensor> by_name_;
  std::vector<StoredTensor> headers_;
};

}  // namespace ddptrain
