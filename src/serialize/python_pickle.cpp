#include "serialize/python_pickle.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include "util/error.h"

namespace ddptrain {
namespace {

void collect(const torch::nn::Module& m, const std::string& prefix, NamedTensors& out) {
  for (const auto& p : m.named_parameters(/*recurse=*/false)) out.emplace_back(prefix + p.key(), p.value());
  for (const auto& b : m.named_buffers(/*recurse=*/false)) out.emplace_back(prefix + b.key(), b.value());
  for (const auto& c : m.named_children()) collect(*c.value(), prefix + c.key() + ".", out);
}

}  // namespace

NamedTensors state_dict(const torch::nn::Module& module) {
  NamedTensors out;
  collect(module, "", out);
  return out;
}

void load_state_dict(torch::nn::Module& module, const NamedTensors& state, const std::string& origin) {
  NamedTensors mine = state_dict(module);
  std::map<std::string, at::Tensor> given(state.begin(), state.end());
  torch::NoGradGuard no_grad;
  for (auto& [key, t] : mine) {
    auto it = given.find(key);
    DDP_CHECK(it != given.end(), origin, " has no entry '", key,
              "': it was saved from a different model or width; use the model flags it was saved with");
    DDP_CHECK(it->second.sizes() == t.sizes(), origin, ": '", key, "' has shape ", it->second.sizes(),
              " but the model expects ", t.sizes(), "; use the model flags it was saved with");
    t.copy_(it->second);
    given.erase(it);
  }
  DDP_CHECK(given.empty(), origin, " has an unexpected entry '", given.empty() ? "" : given.begin()->first,
            "'; it was saved from a different model");
}

std::string pickle_tensors(const NamedTensors& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [k, v] : tensors) dict.insert(k, v.detach().cpu().contiguous());
  std::vector<char> pickled;
  torch::jit::Pickler pickler([&](const char* buf, size_t n) { pickled.insert(pickled.end(), buf, buf + n); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr,
                              /*memoized_class_types=*/nullptr, /*get_tensor_id=*/nullptr,
                              /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(c10::IValue(dict));
  pickler.stop();
  std::string out;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t n) {
      out.append(static_cast<const char*>(data), n);
      return n;
    });
    torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), pickler.tensorData(), writer);
  }  // the writer's destructor writes the zip's end records
  return out;
}

}  // namespace ddptrain
