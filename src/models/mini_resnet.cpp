#include "models/mini_resnet.h"

#include <cmath>
#include <unordered_set>

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/modules/activation.h>

#include "models/recompute.h"
#include "obs/logger.h"

namespace ddptrain {

namespace nn = torch::nn;

int64_t scaled_channels(int64_t base, double width) {
  return std::max<int64_t>(1, static_cast<int64_t>(std::lround(static_cast<double>(base) * width)));
}

torch::nn::AnyModule default_norm(int64_t channels) {
  return torch::nn::AnyModule(nn::BatchNorm2d(channels));
}

BasicBlockImpl::BasicBlockImpl(int64_t in_ch, int64_t out_ch, int64_t stride, const NormFactory& norm,
                               double p)
    : dropout(p) {
  // Creation order = Python's (conv1, bn1, conv2, bn2, shortcut): it decides the RNG draws.
  conv1 = register_module(
      "conv1", nn::Conv2d(nn::Conv2dOptions(in_ch, out_ch, 3).stride(stride).padding(1).bias(false)));
  bn1 = norm(out_ch);
  register_module("bn1", bn1.ptr());
  conv2 = register_module("conv2",
                          nn::Conv2d(nn::Conv2dOptions(out_ch, out_ch, 3).stride(1).padding(1).bias(false)));
  bn2 = norm(out_ch);
  register_module("bn2", bn2.ptr());
  if (stride != 1 || in_ch != out_ch) {
    shortcut = register_module("shortcut", nn::Sequential());
    shortcut->push_back(nn::Conv2d(nn::Conv2dOptions(in_ch, out_ch, 1).stride(stride).bias(false)));
    shortcut->push_back(norm(out_ch));
  }
}

torch::Tensor BasicBlockImpl::forward(const torch::Tensor& x) {
  auto out = torch::relu(bn1.forward(conv1(x)));  // (B, out, H/s, W/s)
  if (dropout > 0) out = torch::dropout(out, dropout, is_training());
  out = bn2.forward(conv2(out));  // (B, out, H/s, W/s)
  out = out + (shortcut ? shortcut->forward(x) : x);
  return torch::relu(out);
}

MiniResNetImpl::MiniResNetImpl(const MiniResNetOptions& o) : opts(o) {
  const int64_t c1 = scaled_channels(64, o.width), c2 = scaled_channels(128, o.width),
                c3 = scaled_channels(256, o.width);
  // Built one module at a time: the arguments of one call are evaluated in an unspecified
  // order (GCC goes right to left), which would change the RNG draws and the weights.
  stem = register_module("stem", nn::Sequential());
  stem->push_back(nn::Conv2d(nn::Conv2dOptions(o.in_channels, c1, 3).padding(1).bias(false)));
  stem->push_back(o.norm(c1));
  stem->push_back(nn::ReLU(nn::ReLUOptions().inplace(true)));
  stages = register_module("stages", nn::Sequential());
  const int64_t spec[6][3] = {{c1, c1, 1}, {c1, c1, 1}, {c1, c2, 2}, {c2, c2, 1}, {c2, c3, 2}, {c3, c3, 1}};
  for (const auto& s : spec) {
    stages->push_back(BasicBlock(s[0], s[1], s[2], o.norm, o.dropout));
    units_.add(stages->ptr(stages->size() - 1));
  }
  recompute_blocks = o.recompute_blocks;
  fc = register_module("fc", nn::Linear(c3, o.num_classes));
}

torch::Tensor MiniResNetImpl::forward(const torch::Tensor& x) {
  auto h = stem->forward(x);  // (B, c1, H, W)
  const bool recompute_now = recompute_blocks && is_training() && at::GradMode::is_enabled();
  for (size_t i = 0; i < stages->size(); ++i) {  // -> (B, c3, H/4, W/4)
    nn::AnyModule block = *(stages->begin() + static_cast<std::ptrdiff_t>(i));
    // See Note [The last block is not recomputed].
    h = units_.run(i, [&] {
      if (!recompute_now || i + 1 == stages->size()) return block.forward(h);
      auto m = block.ptr();
      return recompute([block](const torch::Tensor& t) mutable { return block.forward(t); }, h,
                       m->parameters(), m->buffers());
    });
  }
  h = torch::adaptive_avg_pool2d(h, {1, 1});  // (B, c3, 1, 1)
  return fc(h.flatten(1));                    // (B, classes)
}

namespace {

// A conv layer's row; (h, w) become its output size.
LayerInfo conv_row(const std::string& name, const nn::Conv2dImpl& c, int64_t& h, int64_t& w) {
  const auto& o = c.options;
  const int64_t k0 = (*o.kernel_size())[0], k1 = (*o.kernel_size())[1];
  const int64_t s0 = (*o.stride())[0], s1 = (*o.stride())[1];
  // Every conv of this model pads by (k - 1) / 2 (see the constructors above).
  h = (h + 2 * ((k0 - 1) / 2) - k0) / s0 + 1;
  w = (w + 2 * ((k1 - 1) / 2) - k1) / s1 + 1;
  LayerInfo r;
  r.name = name;
  r.kind = "conv" + std::to_string(k0) + "x" + std::to_string(k1) + (s0 > 1 ? "/s" + std::to_string(s0) : "");
  r.out_shape = {o.out_channels(), h, w};
  r.params = count_parameters(c);
  r.forward_flops = 2 * o.in_channels() * o.out_channels() * k0 * k1 * h * w / o.groups();
  return r;
}

}  // namespace

std::vector<LayerInfo> MiniResNetImpl::layer_table(int64_t h, int64_t w) const {
  std::vector<LayerInfo> rows;
  rows.push_back(conv_row("stem.0", *stem->ptr(0)->as<nn::Conv2dImpl>(), h, w));
  for (size_t i = 0; i < stages->size(); ++i) {
    const auto* b = stages->ptr(i)->as<BasicBlockImpl>();
    const std::string prefix = "stages." + std::to_string(i);
    int64_t h_in = h, w_in = w;
    rows.push_back(conv_row(prefix + ".conv1", *b->conv1, h, w));
    rows.push_back(conv_row(prefix + ".conv2", *b->conv2, h, w));
    if (b->shortcut)
      rows.push_back(
          conv_row(prefix + ".shortcut.0", *b->shortcut->ptr(0)->as<nn::Conv2dImpl>(), h_in, w_in));
  }
  LayerInfo r;
  r.name = "fc";
  r.kind = "linear";
  r.out_shape = {fc->options.out_features()};
  r.params = count_parameters(*fc);
  r.forward_flops = 2 * fc->options.in_features() * fc->options.out_features();
  rows.push_back(r);
  return rows;
}

int64_t MiniResNetImpl::train_flops_per_sample(int64_t h, int64_t w) const {
  int64_t f = 0;
  for (const auto& r : layer_table(h, w)) f += r.forward_flops;
  return 3 * f;
}

int64_t MiniResNetImpl::train_flops_per_sample() const {
  return train_flops_per_sample(opts.image_height, opts.image_width);
}

std::string MiniResNetImpl::describe() const { return str("mini_resnet (width ", opts.width, ")"); }

int64_t count_parameters(const torch::nn::Module& m) {
  int64_t n = 0;
  std::unordered_set<const void*> seen;  // a tensor registered under two names counts once
  for (const auto& p : m.parameters())
    if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) n += p.numel();
  return n;
}

}  // namespace ddptrain
