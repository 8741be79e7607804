// torchvision's image transforms, on decoded RGB pixels (data/image_decode.h), into a
// normalised (3, S, S) float image:
//  - training: RandomResizedCrop(S, scale (0.08, 1), ratio (3/4, 4/3)) and a horizontal flip
//    with probability 1/2;
//  - evaluation: Resize(R) (the shorter side to R, the longer to int(R·long/short)) then
//    CenterCrop(S).
// Both are a crop box in the source image and one resampling of the box to S x S: Pillow's
// antialiased bilinear filter (its resize(size, BILINEAR, box): a triangle filter stretched by
// the downscale factor), which torchvision's antialias=True reproduces. A box may be fractional
// (a JPEG decoded at a DCT scale: the box is scaled with it), and Resize-then-CenterCrop is
// resampled from the box it covers in the source: the same filter taps as resizing the whole
// image and cropping. Computed in float with no rounding between passes, so results differ
// from Pillow's and torchvision's 8-bit fixed point by at most 1/255 of a pixel value (Image.*
// tests).
// Note [Augmentation is a pure function] (data/augment.h) holds for the random crop: its
// draws are a stream seeded by (seed, epoch, sample index).
#pragma once

#include <cstdint>

namespace ddptrain {

/// A crop box in source pixels: rows [top, top + height), columns [left, left + width).
struct CropBox {
  double top = 0, left = 0, height = 0, width = 0;
};

/// A counter-based stream of uniform draws: a pure function of (seed, epoch, index) and the
/// draw's position.
class SampleRandom {
 public:
  SampleRandom(uint64_t seed, int64_t epoch, int64_t index);
  double uniform();  // in [0, 1)
  double uniform(double a, double b) { return a + (b - a) * uniform(); }
  int64_t below(int64_t n);  // in [0, n), n >= 1

 private:
  uint64_t state_;
  uint64_t drawn_ = 0;
};

/// torchvision's RandomResizedCrop.get_params: up to 10 draws of an area fraction in
/// [scale_lo, scale_hi] and a log-uniform aspect ratio in [ratio_lo, ratio_hi], rounded to a
/// whole box that fits, at a uniform position; else the central crop clamped to the ratio range.
CropBox random_resized_crop_box(int height, int width, SampleRandom& rng, double scale_lo = 0.08,
                                double scale_hi = 1.0, double ratio_lo = 3.0 / 4.0,
                                double ratio_hi = 4.0 / 3.0);

/// The box of the source that Resize(resize) then CenterCrop(crop) keeps, in source pixels.
/// torchvision's rounding: the longer side int(resize·long/short), the crop's offset
/// round((n - crop) / 2) half to even (Python's round).
CropBox resize_center_crop_box(int height, int width, int resize, int crop);

/// The box in an image decoded at another size (a DCT-scaled JPEG): scaled per axis.
CropBox scale_box(const CropBox& box, int height, int width, int new_height, int new_width);

struct Normalize {
  float mean[3] = {0.485f, 0.456f, 0.406f};  // ImageNet's, as torchvision's references
  float std[3] = {0.229f, 0.224f, 0.225f};
};

/// Which source pixels the filter may read: the box's own (a crop, then a resize of the crop:
/// RandomResizedCrop, whose filter stops at the crop's edges) or the whole image's (a resize,
/// then a crop: Resize + CenterCrop, whose filter reads past the crop).
enum class FilterReach { kBox, kImage };

/// Resamples `box` of the (height, width, 3) uint8 image to out_h x out_w (Pillow's bilinear
/// filter, antialiased), flips it left-right when asked, and writes ((v / 255) - mean) / std
/// per channel into out (3, out_h, out_w), row-major.
void resample_box(const uint8_t* rgb, int height, int width, const CropBox& box, FilterReach reach, int out_h,
                  int out_w, bool flip, const Normalize& norm, float* out);

/// The DCT scale (eighths, 1..8) at which a JPEG can be decoded and the box still hold at
/// least out_h x out_w pixels: the smallest such scale, so a decode never drops detail that the
/// resampling would keep. 8 (full size) when no smaller one does.
int decode_eighths(const CropBox& box, int out_h, int out_w);

}  // namespace ddptrain
