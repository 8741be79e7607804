#include "models/script_model.h"

#include <filesystem>
#include <regex>

#include <torch/version.h>

#include "obs/logger.h"
#include "util/error.h"

namespace ddptrain {
namespace {

// A node of the mirror tree: holds a scripted submodule's own parameters and buffers.
struct MirrorNode : torch::nn::Module {};

void mirror(torch::nn::Module& into, const torch::jit::Module& from) {
  for (const auto& p : from.named_parameters(/*recurse=*/false))
    into.register_parameter(p.name, p.value, p.value.requires_grad());
  for (const auto& b : from.named_buffers(/*recurse=*/false)) into.register_buffer(b.name, b.value);
  for (const auto& child : from.named_children()) {
    auto node = std::make_shared<MirrorNode>();
    mirror(*node, child.value);
    into.register_module(child.name, node);
  }
}

// LibTorch's message for a file whose format is newer than it reads: "... with version N,
// but the maximum supported version for reading is M ...".
std::string newer_file_message(const std::string& path, const std::string& what) {
  std::smatch m;
  if (!std::regex_search(
          what, m,
          std::regex("with version (\\d+), but the maximum supported version for reading is (\\d+)")))
    return "";
  return str("'", path, "' was saved by a newer torch than this build's LibTorch ", TORCH_VERSION,
             " (its format version is ", m[1].str(), "; this LibTorch reads up to ", m[2].str(),
             "): script and "
             "save the model with torch ",
             TORCH_VERSION, " (or older), or build ddptrain against a newer LibTorch");
}

torch::jit::Module load_script(const std::string& path) {
  const std::string fix = "save it in Python with torch.jit.script(model).save(path) and pass that file";
  DDP_USAGE_CHECK(std::filesystem::is_regular_file(path), "'", path, "' is not a file; ", fix);
  try {
    return torch::jit::load(path, torch::kCPU);
  } catch (const std::exception& e) {
    const std::string newer = newer_file_message(path, e.what());
    if (!newer.empty()) throw UsageError(newer);
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));
    throw UsageError(str("'", path, "' is not a TorchScript archive this LibTorch (", TORCH_VERSION,
                         ") can read: ", what, "; ", fix));
  }
}

}  // namespace

ScriptModel::ScriptModel(const std::string& path, int64_t flops_per_sample)
    : ScriptModel(load_script(path), path, flops_per_sample) {}

ScriptModel::ScriptModel(torch::jit::Module module, std::string name, int64_t flops_per_sample)
    : module_(std::move(module)), name_(std::move(name)), flops_per_sample_(flops_per_sample) {
  mirror(*this, module_);
  DDP_USAGE_CHECK(!parameters().empty(), "'", name_, "' holds a module without parameters: nothing to train");
  module_.train(is_training());
}

at::Tensor ScriptModel::forward(const at::Tensor& x) {
  const c10::IValue out = module_.forward({x});
  hold_replaced_buffers();
  DDP_USAGE_CHECK(out.isTensor(), "'", name_, "': its forward returns ", out.tagKind(),
                  ", not one tensor of logits");
  return out.toTensor();
}

// See Note [A buffer the scripted forward replaces].
void ScriptModel::hold_replaced_buffers() {
  const auto held = named_buffers(/*recurse=*/true);
  for (const auto& b : module_.named_buffers(/*recurse=*/true)) {
    const at::Tensor* mine = held.find(b.name);
    if (mine == nullptr || b.value.unsafeGetTensorImpl() == mine->unsafeGetTensorImpl()) continue;
    DDP_USAGE_CHECK(b.value.sizes() == mine->sizes() && b.value.scalar_type() == mine->scalar_type(), "'",
                    name_, "': its forward replaced buffer '", b.name, "' ", mine->sizes(), " ",
                    mine->scalar_type(), " by one of ", b.value.sizes(), " ", b.value.scalar_type(),
                    "; ddptrain holds each buffer as the module was loaded (to broadcast and checkpoint it): "
                    "keep its shape and dtype, or update it in place");
    {
      torch::NoGradGuard no_grad;
      mine->copy_(b.value);
    }
    torch::jit::Module owner = module_;
    std::string rest = b.name;
    for (size_t dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
      owner = owner.attr(rest.substr(0, dot)).toModule();
      rest = rest.substr(dot + 1);
    }
    owner.setattr(rest, *mine);
  }
}

std::string ScriptModel::describe() const { return str("torchscript ", name_); }

void ScriptModel::train(bool on) {
  Model::train(on);
  module_.train(on);
}

}  // namespace ddptrain
