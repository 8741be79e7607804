#include "data/augment.h"

#include "util/error.h"
#include "util/splitmix.h"

namespace ddptrain {

AugmentOptions augment_for(DatasetKind dataset, uint64_t seed) {
  if (dataset == DatasetKind::kCifar10) return {4, true, seed};
  if (dataset == DatasetKind::kFashionMnist || dataset == DatasetKind::kMnist) return {2, false, seed};
  throw UsageError(
      "augment has no recipe for dataset " + std::string(word(dataset)) +
      "; it is defined for cifar10 (crop with padding 4, horizontal flip), fashion-mnist and mnist "
      "(crop with padding 2)");
}

std::string augment_summary(DatasetKind dataset) {
  if (decodes_images(dataset))
    return "RandomResizedCrop (scale 0.08-1, ratio 3/4-4/3) and horizontal flip, a function of (seed, epoch, "
           "sample "
           "index)";
  const AugmentOptions o = augment_for(dataset, 0);
  return "random crop with padding " + std::to_string(o.pad) + (o.hflip ? " and horizontal flip" : "") +
         ", a function of (seed, epoch, sample index)";
}

AugmentChoice augment_choice(const AugmentOptions& o, int64_t epoch, int64_t index) {
  const uint64_t h = splitmix64(splitmix64(splitmix64(o.seed) ^ static_cast<uint64_t>(epoch)) ^
                                static_cast<uint64_t>(index));
  const auto span = static_cast<uint64_t>(2 * o.pad + 1);
  AugmentChoice c;
  c.dy = static_cast<int>(h % span);
  c.dx = static_cast<int>((h / span) % span);
  c.flip = o.hflip && ((h >> 63) & 1u);
  return c;
}

at::Tensor augment_image(const at::Tensor& image, int pad, const AugmentChoice& c) {
  const int64_t H = image.size(1), W = image.size(2);
  at::Tensor out = image;
  if (pad > 0)
    out =
        at::constant_pad_nd(image, {pad, pad, pad, pad}, 0).slice(1, c.dy, c.dy + H).slice(2, c.dx, c.dx + W);
  if (c.flip) out = out.flip({2});
  return out.contiguous();
}

Example AugmentedDataset::get(int64_t index) const {
  Example e = base_->get(index);
  e.input = augment_image(e.input, opts_.pad, augment_choice(opts_, epoch_.load(), index));
  return e;
}

}  // namespace ddptrain
