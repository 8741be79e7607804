#include "data/image_dataset.h"

#include <cmath>
#include <utility>

#include "data/image_decode.h"
#include "util/error.h"

namespace ddptrain {

DatasetShape ImageDataset::shape() const { return {3, opts_.image_size, opts_.image_size, num_classes()}; }

at::Tensor ImageDataset::image(int64_t index, int64_t epoch) const {
  const std::vector<uint8_t> data = bytes(index);
  const ImageSize full = image_size(data.data(), data.size());
  const int S = opts_.image_size;
  SampleRandom rng(opts_.seed, epoch, index);
  const CropBox box = opts_.random_crop ? random_resized_crop_box(full.height, full.width, rng)
                                        : resize_center_crop_box(full.height, full.width, opts_.resize(), S);
  const bool flip = opts_.random_crop && rng.uniform() < 0.5;
  const bool jpeg = sniff_image(data.data(), data.size()) == ImageFormat::kJpeg;
  const int eighths = jpeg && opts_.jpeg_dct_scaling ? decode_eighths(box, S, S) : 8;
  const int scaled_h = jpeg ? scaled_dim(full.height, eighths) : full.height;
  const int scaled_w = jpeg ? scaled_dim(full.width, eighths) : full.width;
  CropBox at = scale_box(box, full.height, full.width, scaled_h, scaled_w);
  // A random crop's filter reads only the box: a JPEG decodes only the box's rows and columns.
  const FilterReach reach = opts_.random_crop ? FilterReach::kBox : FilterReach::kImage;
  DecodedImage img;
  if (jpeg && reach == FilterReach::kBox) {
    const int top = static_cast<int>(std::floor(at.top)), left = static_cast<int>(std::floor(at.left));
    img = decode_jpeg_region(data.data(), data.size(), eighths,
                             {top, left, static_cast<int>(std::ceil(at.top + at.height)) - top,
                              static_cast<int>(std::ceil(at.left + at.width)) - left});
    at.top -= img.top;
    at.left -= img.left;
  } else {
    img = decode_image(data.data(), data.size(), eighths);
  }
  at::Tensor out = at::empty({3, S, S}, at::kFloat);
  resample_box(img.rgb.data(), img.height, img.width, at, reach, S, S, flip, opts_.normalize,
               out.data_ptr<float>());
  return out;
}

Example ImageDataset::get(int64_t index) const {
  const int64_t epoch = epoch_.load();
  std::string last;
  for (int64_t tries = 0; tries < size(); ++tries) {
    // Each image is tried again, even one that failed before: whether a JPEG decodes can depend
    // on its crop (a region decode stops below the box), so skipping what failed once would make
    // the samples depend on this process's history (a resumed run, another world size).
    const int64_t i = (index + tries) % size();
    try {
      return {image(i, epoch), at::scalar_tensor(label(i), at::kLong)};
    } catch (const ImageError& e) {
      if (opts_.bad_images == BadImagePolicy::kError)
        throw UsageError(
            str(kind_, " '", name(i), "' does not decode: ", e.what(),
                "; replace or remove it, or skip such images (bad_images=skip: --bad_images skip)"));
      last = name(i) + ": " + e.what();
      std::lock_guard<std::mutex> lock(bad_mu_);
      if (bad_.insert(i).second) reported_.push_back(last);
    }
  }
  throw UsageError(str("no image in ", source_, " decodes (", last, ")"));
}

std::vector<std::string> ImageDataset::take_skipped() const {
  std::lock_guard<std::mutex> lock(bad_mu_);
  return std::exchange(reported_, {});
}

}  // namespace ddptrain
