#include "train/objective_check.h"

#include <algorithm>

#include <torch/nn/functional/loss.h>

#include "train/training_modes.h"
#include "util/error.h"

namespace ddptrain {
namespace {

std::string shape_of(const at::Tensor& t) {
  std::string s = "(";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + ")";
}

// The shape the loss needs of the model's output for these targets.
std::string wanted_output(const at::Tensor& targets, LossKind loss, const DatasetShape& shape) {
  if (loss == LossKind::kMse) return shape_of(targets) + ", the targets' shape";
  std::string s = shape_of(targets);
  s = s.substr(0, s.size() - 1) + (targets.dim() ? ", " : "") + ">= " + std::to_string(shape.num_classes) +
      ")";
  return s + (shape.is_tokens() ? ": (B, T, vocab) logits" : ": (B, classes) logits");
}

bool output_fits(const at::Tensor& out, const at::Tensor& targets, LossKind loss, const DatasetShape& shape) {
  if (loss == LossKind::kMse) return out.sizes() == targets.sizes();
  return out.dim() == targets.dim() + 1 && out.sizes().slice(0, targets.dim()) == targets.sizes() &&
         out.size(-1) >= shape.num_classes;
}

}  // namespace

std::string cause_of(const std::string& what) {
  const std::string first = what.substr(0, what.find('\n'));
  if (first.find("TorchScript interpreter") == std::string::npos) return first;
  std::string last;
  size_t begin = 0;
  while (begin < what.size()) {
    const size_t end = std::min(what.find('\n', begin), what.size());
    const std::string line = what.substr(begin, end - begin);
    if (line.find("Error: ") != std::string::npos && line.find_first_not_of(' ') == 0) last = line;
    begin = end + 1;
  }
  return last.empty() ? first : last;
}

namespace {

at::Tensor forward_once(const Trainable& model, const at::Tensor& inputs, const FitCheck& c) {
  torch::NoGradGuard no_grad;
  const TrainingModes modes(*model.module);  // Note [Each module keeps its mode]
  model.module->eval();                      // no running statistics updated, no dropout drawn from the RNG
  try {
    at::Tensor out = model.forward(inputs);
    modes.restore();
    return out;
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    throw UsageError(
        c10::str(c.model_name, ": its forward failed on a batch of ", shape_of(inputs), " ",
                 inputs.scalar_type(), " inputs from ", c.data_name, ": ", cause_of(e.what()),
                 " (ddptrain calls forward with one tensor: (B, C, H, W) images or (B, T) int64 tokens)"));
  }
}

// The data's first two samples (one when it holds one), stacked: (inputs, targets).
std::pair<at::Tensor, at::Tensor> first_samples(const Dataset& data, const FitCheck& c) {
  DDP_USAGE_CHECK(data.size() > 0, c.data_name, " holds no samples");
  std::vector<at::Tensor> inputs, targets;
  for (int64_t i = 0; i < std::min<int64_t>(2, data.size()); ++i) {
    Example e = data.get(i);
    inputs.push_back(e.input);
    targets.push_back(e.target);
  }
  return {at::stack(inputs), at::stack(targets)};
}

// The batch as the Trainer feeds it: on the device, NHWC under channels_last.
at::Tensor on_device(const at::Tensor& inputs, const FitCheck& c) {
  at::Tensor x = inputs.to(c.device);
  return c.channels_last && x.dim() == 4 ? x.contiguous(at::MemoryFormat::ChannelsLast) : x;
}

}  // namespace

Objective objective_for(LossKind loss, FusedLoss fused) {
  return loss == LossKind::kMse ? Objective::mean_squared_error() : Objective::classification(fused);
}

std::string check_model_fits_data(const Trainable& model, const Dataset& data, const FitCheck& c) {
  const auto [inputs, y] = first_samples(data, c);
  const bool float_targets = y.is_floating_point();
  DDP_USAGE_CHECK(c.loss != LossKind::kMse || float_targets, c.loss_name, " mse needs float targets; ",
                  c.data_name, " has ", y.scalar_type(), " labels: use ", c.loss_name,
                  " cross_entropy, or save float labels");
  DDP_USAGE_CHECK(c.loss != LossKind::kCrossEntropy || !float_targets, c.data_name, " has float targets ",
                  shape_of(y), ": pass ", c.loss_name, " mse, or save int64 class indices for cross-entropy");
  if (!c.run_forward) return "";
  const at::Tensor x = on_device(inputs, c);
  const at::Tensor out = forward_once(model, x, c);
  DDP_USAGE_CHECK(output_fits(out, y, c.loss, data.shape()), c.model_name, ": on a batch of ", shape_of(x),
                  " inputs from ", c.data_name, " its output has shape ", shape_of(out), "; ", c.loss_name,
                  " ", c.loss, " needs ", wanted_output(y, c.loss, data.shape()),
                  ". Change the module's output (or the data)");
  // Token logits may hold more rows than the vocabulary (padded: Note [Padded vocabulary]); a
  // classifier's extra logits are classes the data may lack (a webdataset's count is its highest
  // label + 1), which take part in the loss's softmax and the accuracy's argmax.
  const int64_t classes = data.shape().num_classes;
  if (c.loss != LossKind::kCrossEntropy || data.shape().is_tokens() || out.size(-1) == classes) return "";
  return c10::str(
      c.model_name, " gives ", out.size(-1), " logits for ", c.data_name, "'s ", classes, " classes: the ",
      out.size(-1) - classes,
      " more are never targets here, but take part in the loss's softmax and the accuracy's argmax");
}

void check_objective_fits(const Trainable& model, const Dataset& data, const Objective& objective,
                          const FitCheck& c) {
  const auto [inputs, targets] = first_samples(data, c);
  const at::Tensor y = targets.to(c.device);
  const at::Tensor out = forward_once(model, on_device(inputs, c), c);
  try {
    torch::NoGradGuard no_grad;
    const at::Tensor loss = objective.loss(out, y);
    DDP_USAGE_CHECK(loss.numel() == 1, "the objective's loss of ", c.model_name, "'s output ", shape_of(out),
                    " and the targets ", shape_of(y), " has shape ", shape_of(loss),
                    ", not one number: reduce it to the batch's mean");
    if (objective.count) {
      const at::Tensor n = objective.count(out, y);
      DDP_USAGE_CHECK(n.numel() == 1 && !n.is_floating_point() && !n.is_complex(),
                      "the objective's count of the targets ", shape_of(y), " is ", shape_of(n), " ",
                      n.scalar_type(),
                      ", not one integer: give the number of targets the loss's mean is over");
    }
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    throw UsageError(c10::str(c.model_name, "'s output ", shape_of(out), " ", out.scalar_type(),
                              " does not fit the objective's loss with targets ", shape_of(y), " ",
                              y.scalar_type(), " from ", c.data_name, ": ", cause_of(e.what()),
                              ". Change the module's output, the targets or the loss"));
  }
}

}  // namespace ddptrain
