// Training-data augmentation (--augment): a random crop of the image zero-padded by `pad`
// pixels on each side (zero after normalisation: the dataset mean), and, for natural images,
// a horizontal flip with probability 1/2.
//  - cifar10: pad 4 and flip (the standard CIFAR recipe); fashion-mnist, mnist: pad 2, no
//    flip (digits and clothes have a handedness that flips would blur).
// Note [Augmentation is a pure function]: the crop offsets and the flip of a sample are a
// hash of (seed, epoch, sample index), not draws from a shared generator, so they do not
// depend on which loader thread builds the sample, on timing or on the world size, and a
// resumed run sees exactly the augmentations of the uninterrupted one.
#pragma once

#include "data/data_options.h"

#include <atomic>
#include <cstdint>
#include <string>

#include "data/datasets.h"

namespace ddptrain {

struct AugmentOptions {
  int pad = 0;  // crop offsets in [0, 2·pad] on each axis
  bool hflip = false;
  uint64_t seed = 0;
};

/// The recipe for a dataset; UsageError for a dataset without one.
AugmentOptions augment_for(DatasetKind dataset, uint64_t seed);
/// The recipe in words, for the log: "random crop with padding 4 and horizontal flip, ...".
std::string augment_summary(DatasetKind dataset);

struct AugmentChoice {
  int dy = 0, dx = 0;  // the crop's top-left corner in the padded image
  bool flip = false;
};
/// The augmentation of sample `index` in `epoch`: a pure function of its arguments.
AugmentChoice augment_choice(const AugmentOptions& o, int64_t epoch, int64_t index);

/// Applies the choice to one (C, H, W) image.
at::Tensor augment_image(const at::Tensor& image, int pad, const AugmentChoice& c);

/// A view of a dataset whose get(i) is augmented for the current epoch. set_epoch is called
/// between epochs (the loader's threads do not run then).
class AugmentedDataset : public Dataset {
 public:
  AugmentedDataset(std::unique_ptr<Dataset> base, AugmentOptions o) : base_(std::move(base)), opts_(o) {}
  void set_epoch(int64_t epoch) override { epoch_.store(epoch); }
  int64_t size() const override { return base_->size(); }
  Example get(int64_t index) const override;
  DatasetShape shape() const override { return base_->shape(); }
  std::vector<std::string> take_skipped() const override { return base_->take_skipped(); }
  uint64_t label_names_hash() const override { return base_->label_names_hash(); }
  std::vector<std::string> label_names() const override { return base_->label_names(); }
  uint64_t files_hash() const override { return base_->files_hash(); }

 private:
  std::unique_ptr<Dataset> base_;
  AugmentOptions opts_;
  std::atomic<int64_t> epoch_{0};
};

}  // namespace ddptrain
