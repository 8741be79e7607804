#include "data/image_transforms.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "util/splitmix.h"

namespace ddptrain {

SampleRandom::SampleRandom(uint64_t seed, int64_t epoch, int64_t index)
    : state_(splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(epoch)) ^
                        static_cast<uint64_t>(index))) {}

double SampleRandom::uniform() {
  const uint64_t bits = splitmix64(state_ + ++drawn_) >> 11;  // 53 bits
  return static_cast<double>(bits) * 0x1.0p-53;
}

int64_t SampleRandom::below(int64_t n) {
  return std::min<int64_t>(n - 1, static_cast<int64_t>(uniform() * static_cast<double>(n)));
}

CropBox random_resized_crop_box(int height, int width, SampleRandom& rng, double scale_lo, double scale_hi,
                                double ratio_lo, double ratio_hi) {
  const double area = static_cast<double>(height) * width;
  const double log_lo = std::log(ratio_lo), log_hi = std::log(ratio_hi);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * rng.uniform(scale_lo, scale_hi);
    const double aspect = std::exp(rng.uniform(log_lo, log_hi));
    // Python's round() is half to even: nearbyint in the default rounding mode.
    const auto w = static_cast<int64_t>(std::nearbyint(std::sqrt(target * aspect)));
    const auto h = static_cast<int64_t>(std::nearbyint(std::sqrt(target / aspect)));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int64_t top = rng.below(height - h + 1);
      const int64_t left = rng.below(width - w + 1);
      return {static_cast<double>(top), static_cast<double>(left), static_cast<double>(h),
              static_cast<double>(w)};
    }
  }
  const double in_ratio = static_cast<double>(width) / height;
  int64_t w = width, h = height;
  if (in_ratio < ratio_lo)
    h = static_cast<int64_t>(std::nearbyint(w / ratio_lo));
  else if (in_ratio > ratio_hi)
    w = static_cast<int64_t>(std::nearbyint(h * ratio_hi));
  return {static_cast<double>((height - h) / 2), static_cast<double>((width - w) / 2), static_cast<double>(h),
          static_cast<double>(w)};
}

CropBox resize_center_crop_box(int height, int width, int resize, int crop) {
  const bool tall = height >= width;
  const int64_t short_side = tall ? width : height, long_side = tall ? height : width;
  const int64_t new_long = static_cast<int64_t>(resize) * long_side / short_side;  // int(): floor
  const double rh = static_cast<double>(tall ? new_long : resize),
               rw = static_cast<double>(tall ? resize : new_long);
  const double top = std::nearbyint((rh - crop) / 2.0), left = std::nearbyint((rw - crop) / 2.0);
  const double sy = height / rh, sx = width / rw;
  return {top * sy, left * sx, crop * sy, crop * sx};
}

CropBox scale_box(const CropBox& b, int height, int width, int new_height, int new_width) {
  const double sy = static_cast<double>(new_height) / height, sx = static_cast<double>(new_width) / width;
  return {b.top * sy, b.left * sx, b.height * sy, b.width * sx};
}

int decode_eighths(const CropBox& box, int out_h, int out_w) {
  for (int m = 1; m < 8; ++m)
    if (box.width * m / 8 >= out_w && box.height * m / 8 >= out_h) return m;
  return 8;
}

namespace {

// Pillow's resampling taps for one axis (its precompute_coeffs): output pixel i reads
// count[i] source pixels from first[i], weighted by a triangle filter stretched by the
// downscale factor, normalised to sum 1.
struct Taps {
  std::vector<int> first, count;
  std::vector<float> weight;  // ksize per output pixel
  int ksize = 0;
};

// Reads only source pixels [begin, end).
Taps taps(double in0, double in1, int begin, int end, int out_size) {
  const double scale = (in1 - in0) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;  // bilinear: support 1
  Taps t;
  t.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.first.resize(out_size);
  t.count.resize(out_size);
  t.weight.assign(static_cast<size_t>(out_size) * t.ksize, 0.0f);
  std::vector<double> k(t.ksize);
  for (int i = 0; i < out_size; ++i) {
    const double center = in0 + (i + 0.5) * scale;
    // Pillow truncates toward zero in the crop's own coordinates (an integer offset from ours).
    const int lo = std::max(static_cast<int>(center - begin - support + 0.5), 0) + begin;
    const int n = std::min(static_cast<int>(center - begin + support + 0.5) + begin, end) - lo;
    double sum = 0;
    for (int x = 0; x < n; ++x) {
      const double d = std::fabs((x + lo - center + 0.5) / filterscale);
      k[x] = d < 1.0 ? 1.0 - d : 0.0;
      sum += k[x];
    }
    t.first[i] = lo;
    t.count[i] = std::max(n, 0);
    for (int x = 0; x < n; ++x)
      t.weight[static_cast<size_t>(i) * t.ksize + x] = static_cast<float>(sum ? k[x] / sum : 0);
  }
  return t;
}

}  // namespace

void resample_box(const uint8_t* rgb, int height, int width, const CropBox& box, FilterReach reach, int out_h,
                  int out_w, bool flip, const Normalize& norm, float* out) {
  // The pixels a box reaches: those it covers in part or whole.
  const auto range = [&](double a, double n, int size) {
    if (reach == FilterReach::kImage) return std::pair<int, int>{0, size};
    return std::pair<int, int>{std::max(0, static_cast<int>(std::floor(a))),
                               std::min(size, static_cast<int>(std::ceil(a + n)))};
  };
  const auto [x0, x1] = range(box.left, box.width, width);
  const auto [yb, ye] = range(box.top, box.height, height);
  const Taps tx = taps(box.left, box.left + box.width, x0, x1, out_w);
  const Taps ty = taps(box.top, box.top + box.height, yb, ye, out_h);
  // The source rows any output row reads, passed horizontally once each, into three planes
  // (channel, row, column) so that the vertical pass runs along contiguous rows.
  const int y0 = ty.first.front();
  const int y1 = ty.first.back() + ty.count.back();
  const size_t rows_n = static_cast<size_t>(std::max(y1 - y0, 0)), row = static_cast<size_t>(out_w);
  std::vector<float> rows(3 * rows_n * row);
  for (int y = y0; y < y1; ++y) {
    const uint8_t* src = rgb + static_cast<size_t>(y) * width * 3;
    float* d = rows.data() + static_cast<size_t>(y - y0) * row;
    for (int ox = 0; ox < out_w; ++ox) {
      const float* w = &tx.weight[static_cast<size_t>(ox) * tx.ksize];
      const uint8_t* s = src + static_cast<size_t>(tx.first[ox]) * 3;
      float r = 0, g = 0, b = 0;
      for (int k = 0; k < tx.count[ox]; ++k) {
        r += w[k] * s[3 * k];
        g += w[k] * s[3 * k + 1];
        b += w[k] * s[3 * k + 2];
      }
      const size_t at = static_cast<size_t>(flip ? out_w - 1 - ox : ox);
      d[at] = r;
      d[rows_n * row + at] = g;
      d[2 * rows_n * row + at] = b;
    }
  }
  const size_t plane = static_cast<size_t>(out_h) * out_w;
  for (int c = 0; c < 3; ++c) {
    const float scale = 1.0f / (255.0f * norm.std[c]), shift = norm.mean[c] / norm.std[c];
    const float* channel = rows.data() + c * rows_n * row;
    for (int oy = 0; oy < out_h; ++oy) {
      const float* w = &ty.weight[static_cast<size_t>(oy) * ty.ksize];
      const float* src = channel + static_cast<size_t>(ty.first[oy] - y0) * row;
      float* dst = out + c * plane + static_cast<size_t>(oy) * row;
      std::fill(dst, dst + row, 0.0f);
      for (int k = 0; k < ty.count[oy]; ++k) {
        const float wk = w[k];
        const float* s = src + static_cast<size_t>(k) * row;
        for (size_t x = 0; x < row; ++x) dst[x] += wk * s[x];
      }
      for (size_t x = 0; x < row; ++x) dst[x] = dst[x] * scale - shift;
    }
  }
}

}  // namespace ddptrain
