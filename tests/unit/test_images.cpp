// Images (#30 item 2): JPEG and PNG decode as Pillow decodes them; the crop and the resize
// equal torchvision's (PIL and tensor paths) on the same image and box within 1/255; the
// random crop's boxes follow torchvision's rules; every damaged file is an ImageError, never a
// crash (a seeded mutation loop).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <zlib.h>

#include "data/image_decode.h"
#include "data/image_transforms.h"
#include "image_fixtures.h"
#include "util/strings.h"

using namespace ddptrain;
namespace fs = std::filesystem;

namespace {

DecodedImage images_decode(const std::string& path, int eighths = 8) {
  const std::string b = images_slurp(path);
  return decode_image(reinterpret_cast<const uint8_t*>(b.data()), b.size(), eighths);
}

// The largest per-pixel difference of two same-sized images of 8-bit values.
int images_max_diff(const std::vector<uint8_t>& a, const std::string& b) {
  EXPECT_EQ(a.size(), b.size());
  int worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::abs(int{a[i]} - int{static_cast<uint8_t>(b[i])}));
  return worst;
}

// Our crop as 0..255 values (H, W, 3): the normalisation undone.
std::vector<float> images_crop(const DecodedImage& img, const CropBox& box, int S, bool flip,
                               FilterReach reach = FilterReach::kBox) {
  const Normalize n;
  std::vector<float> chw(3 * S * S);
  resample_box(img.rgb.data(), img.height, img.width, box, reach, S, S, flip, n, chw.data());
  std::vector<float> hwc(chw.size());
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < S * S; ++i) hwc[i * 3 + c] = (chw[c * S * S + i] * n.std[c] + n.mean[c]) * 255.0f;
  return hwc;
}

double images_worst(const std::vector<float>& ours, const std::string& theirs, size_t offset) {
  double worst = 0;
  for (size_t i = 0; i < ours.size(); ++i)
    worst =
        std::max(worst, static_cast<double>(std::fabs(ours[i] - static_cast<uint8_t>(theirs[offset + i]))));
  return worst;
}

}  // namespace

TEST(Image, DecodesAsPillowDoes) {
  const std::string& dir = images_dir();
  // PNG is lossless: equal. JPEG: libjpeg-turbo here (Debian's 2.1) and in Pillow's wheel
  // (3.x) run the same integer IDCT and upsampling: equal as well.
  // CMYK JPEGs (once refused), 16-bit PNGs (once brightened as linear light) and a PNG's gAMA
  // chunk (once applied) as Pillow reads them.
  const std::vector<std::string> names = {
      "photo.png", "tall.png",  "rgba.png",   "photo.jpg", "photo444.jpg", "progressive.jpg", "grey.jpg",
      "cmyk.jpg",  "rgb16.png", "grey16.png", "gamma.png", "palette.png",  "grey_alpha.png"};
  std::string jobs;
  for (const auto& name : names) jobs += str("decode ", dir, "/", name, " ", dir, "/", name, ".pil\n");
  images_put(dir + "/decode.jobs", jobs);
  const std::string err = images_python("batch " + dir + "/decode.jobs", dir + "/py.log");
  ASSERT_EQ(err, "") << err;
  for (const auto& name : names) {
    const DecodedImage ours = images_decode(dir + "/" + name);
    const std::string pil = images_slurp(dir + "/" + name + ".pil");
    ASSERT_EQ(ours.rgb.size(), pil.size()) << name;
    EXPECT_EQ(images_max_diff(ours.rgb, pil), 0) << name;
  }
  const std::string b = images_slurp(dir + "/photo.jpg");
  const ImageSize s = image_size(reinterpret_cast<const uint8_t*>(b.data()), b.size());
  EXPECT_EQ(s.width, 500);
  EXPECT_EQ(s.height, 375);
  const DecodedImage quarter = images_decode(dir + "/photo.jpg", 2);
  EXPECT_EQ(quarter.width, 125);
  EXPECT_EQ(quarter.height, 94);  // ceil(375 / 4)
}

TEST(Image, CropsAndResizesEqualTorchvisionWithin1Of255) {
  const std::string& dir = images_dir();
  const DecodedImage img = images_decode(dir + "/photo.png");
  images_put(dir + "/photo.rgb", std::string(img.rgb.begin(), img.rgb.end()));
  // Downscales by 1..8 (taps up to 17 wide), an upscale, edge boxes, and random crops.
  std::vector<CropBox> boxes = {{0, 0, 375, 500}, {10, 20, 300, 280}, {100, 200, 40, 30},
                                {0, 450, 50, 50}, {374, 0, 1, 1},     {5, 7, 224, 224}};
  for (int i = 0; i < 20; ++i) {
    SampleRandom r(7, 0, i);
    boxes.push_back(random_resized_crop_box(img.height, img.width, r));
  }
  std::string lines;
  for (const auto& b : boxes) lines += str(b.top, " ", b.left, " ", b.height, " ", b.width, "\n");
  images_put(dir + "/boxes.txt", lines);
  std::string jobs;
  for (int S : {224, 64})
    jobs += str("crops ", dir, "/photo.rgb ", img.height, " ", img.width, " ", S, " ", dir, "/boxes.txt ",
                dir, "/tv", S, ".rgb\n");
  images_put(dir + "/crops.jobs", jobs);
  const std::string err = images_python("batch " + dir + "/crops.jobs", dir + "/py.log");
  ASSERT_EQ(err, "") << err;
  for (int S : {224, 64}) {
    const std::string tv = images_slurp(str(dir, "/tv", S, ".rgb"));
    const size_t n = static_cast<size_t>(S) * S * 3;
    ASSERT_EQ(tv.size(), boxes.size() * 3 * n);
    for (size_t k = 0; k < boxes.size(); ++k) {
      const std::vector<float> ours = images_crop(img, boxes[k], S, false);
      EXPECT_LE(images_worst(ours, tv, 3 * k * n), 1.0 + 1e-3) << "PIL, box " << k << ", S " << S;
      EXPECT_LE(images_worst(ours, tv, 3 * k * n + n), 1.0 + 1e-3) << "tensor, box " << k << ", S " << S;
      EXPECT_LE(images_worst(images_crop(img, boxes[k], S, true), tv, 3 * k * n + 2 * n), 1.0 + 1e-3)
          << "flipped, box " << k;
    }
  }
}

TEST(Image, ResizeThenCenterCropEqualsTorchvisionWithin1Of255) {
  const std::string& dir = images_dir();
  const std::vector<std::string> names = {"photo.png", "tall.png", "wide.png"};
  const std::vector<std::pair<int, int>> sizes = {{256, 224}, {73, 64}, {32, 28}};
  std::string jobs;
  for (const auto& name : names) {
    const DecodedImage img = images_decode(dir + "/" + name);
    images_put(dir + "/" + name + ".rgb", std::string(img.rgb.begin(), img.rgb.end()));
    for (auto [R, S] : sizes)
      jobs += str("eval ", dir, "/", name, ".rgb ", img.height, " ", img.width, " ", R, " ", S, " ", dir, "/",
                  name, R, ".tv\n");
  }
  images_put(dir + "/eval.jobs", jobs);
  const std::string err = images_python("batch " + dir + "/eval.jobs", dir + "/py.log");
  ASSERT_EQ(err, "") << err;
  for (const auto& name : names) {
    const DecodedImage img = images_decode(dir + "/" + name);
    for (auto [R, S] : sizes) {
      const std::string tv = images_slurp(str(dir, "/", name, R, ".tv"));
      const size_t n = static_cast<size_t>(S) * S * 3;
      ASSERT_EQ(tv.size(), 2 * n);
      const std::vector<float> ours = images_crop(img, resize_center_crop_box(img.height, img.width, R, S), S,
                                                  false, FilterReach::kImage);
      EXPECT_LE(images_worst(ours, tv, 0), 1.0 + 1e-3) << name << " PIL R " << R << " S " << S;
      EXPECT_LE(images_worst(ours, tv, n), 1.0 + 1e-3) << name << " tensor R " << R << " S " << S;
    }
  }
}

TEST(Image, RandomResizedCropBoxesFollowTorchvisionsRules) {
  // Every drawn box fits, covers 8-100% of the area and has a ratio in [3/4, 4/3] (up to the
  // rounding to whole pixels); the draws are a pure function of (seed, epoch, index).
  int distinct = 0;
  CropBox prev;
  for (int i = 0; i < 2000; ++i) {
    SampleRandom r(3, i % 5, i);
    const CropBox b = random_resized_crop_box(375, 500, r);
    ASSERT_GE(b.top, 0);
    ASSERT_GE(b.left, 0);
    ASSERT_LE(b.top + b.height, 375);
    ASSERT_LE(b.left + b.width, 500);
    const double area = b.height * b.width / (375.0 * 500.0), ratio = b.width / b.height;
    EXPECT_GE(area, 0.08 - 0.01);
    EXPECT_LE(area, 1.0);
    EXPECT_GE(ratio, 0.75 * 0.9);
    EXPECT_LE(ratio, 4.0 / 3.0 / 0.9);
    SampleRandom again(3, i % 5, i);
    const CropBox c = random_resized_crop_box(375, 500, again);
    EXPECT_EQ(b.top, c.top);
    EXPECT_EQ(b.width, c.width);
    distinct += b.width != prev.width || b.top != prev.top;
    prev = b;
  }
  EXPECT_GT(distinct, 1900);
  // An image no draw fits: torchvision's fallback, the central crop clamped to the ratios.
  const std::string& dir = images_dir();
  images_put(dir + "/fb.jobs",
             str("rrc_fallback 10 1000 ", dir, "/fb0.txt\nrrc_fallback 1000 10 ", dir, "/fb1.txt\n"));
  const std::string err = images_python("batch " + dir + "/fb.jobs", dir + "/py.log");
  ASSERT_EQ(err, "") << err;
  int k = 0;
  for (auto [H, W] : {std::pair{10, 1000}, std::pair{1000, 10}}) {
    SampleRandom r(1, 0, 0);
    const CropBox b = random_resized_crop_box(H, W, r);
    EXPECT_EQ(images_slurp(str(dir, "/fb", k++, ".txt")),
              str(b.top, " ", b.left, " ", b.height, " ", b.width, "\n"));
  }
}

TEST(Image, DctScaledDecodeStaysCloseToTheFullDecode) {
  // A 500x375 JPEG cropped whole to 112: decoded at 3/8 (188x141), then resampled.
  const std::string& dir = images_dir();
  const CropBox box{0, 0, 375, 500};
  const int m = decode_eighths(box, 112, 112);
  EXPECT_EQ(m, 3);
  const DecodedImage full = images_decode(dir + "/photo.jpg"), scaled = images_decode(dir + "/photo.jpg", m);
  EXPECT_EQ(scaled.width, scaled_dim(500, 3));
  const std::vector<float> a = images_crop(full, box, 112, false);
  const std::vector<float> b =
      images_crop(scaled, scale_box(box, full.height, full.width, scaled.height, scaled.width), 112, false);
  double mean = 0;
  for (size_t i = 0; i < a.size(); ++i) mean += std::fabs(a[i] - b[i]);
  mean /= static_cast<double>(a.size());
  std::printf("DCT-scaled decode at %d/8: mean |difference| %.2f of 255\n", m, mean);
  EXPECT_GT(mean, 0.0) << "the scaled decode was not used";
  EXPECT_LT(mean, 3.0);
}

TEST(Image, DamagedFilesAreImageErrorsNeverACrash) {
  const std::string& dir = images_dir();
  const auto error_of = [](const std::string& bytes, int eighths = 8) -> std::string {
    try {
      decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), eighths);
      return "";
    } catch (const ImageError& e) {
      return e.what();
    }
  };
  const std::string jpg = images_slurp(dir + "/photo.jpg"), png = images_slurp(dir + "/photo.png");
  EXPECT_NE(error_of(jpg.substr(0, jpg.size() / 2)).find("Premature end"), std::string::npos);
  EXPECT_NE(error_of(png.substr(0, png.size() / 2)), "");
  EXPECT_NE(error_of("").find("empty file"), std::string::npos);
  EXPECT_NE(error_of("GIF89a....").find("neither JPEG nor PNG"), std::string::npos);
  // A header claiming 65500 x 65500 pixels: refused before any allocation.
  std::string bomb = png;
  const unsigned char big[8] = {0, 0, 0xff, 0xdc, 0, 0, 0xff, 0xdc};
  bomb.replace(16, 8, reinterpret_cast<const char*>(big), 8);
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(bomb.data() + 12), 17);  // IHDR's type and data
  const unsigned char be[4] = {static_cast<unsigned char>(crc >> 24), static_cast<unsigned char>(crc >> 16),
                               static_cast<unsigned char>(crc >> 8), static_cast<unsigned char>(crc)};
  bomb.replace(29, 4, reinterpret_cast<const char*>(be), 4);
  EXPECT_NE(error_of(bomb).find("decompression-bomb"), std::string::npos) << error_of(bomb);
  // The mutation loop: flipped bytes, truncations and spliced garbage, at full and 1/4 scale.
  std::mt19937_64 rng(20261203);
  int failed = 0, decoded = 0;
  for (int i = 0; i < 400; ++i) {
    std::string m = i % 2 ? jpg : png;
    const int kind = static_cast<int>(rng() % 3);
    if (kind == 0)
      for (int k = 0; k < 1 + static_cast<int>(rng() % 8); ++k)
        m[rng() % m.size()] = static_cast<char>(rng());
    else if (kind == 1)
      m.resize(rng() % m.size());
    else
      m.insert(rng() % m.size(), std::string(1 + rng() % 64, static_cast<char>(rng())));
    const std::string e = error_of(m, i % 4 == 1 ? 2 : 8);
    (e.empty() ? decoded : failed) += 1;
    try {  // the crop decoder on the same bytes: decodes or refuses, never crashes
      decode_jpeg_region(reinterpret_cast<const uint8_t*>(m.data()), m.size(), i % 4 == 1 ? 2 : 8,
                         {20, 30, 60, 90});
    } catch (const ImageError&) {
    }
  }
  std::printf("mutated files: %d decoded, %d refused with a reason\n", decoded, failed);
  EXPECT_GT(failed, 100);
}

TEST(Image, AJpegCropDecodesAsTheWholeDecodeDoesThere) {
  // decode_jpeg_region: the crop's pixels as the whole decode's, at full and reduced DCT scales,
  // for 4:2:0, 4:4:4, progressive and greyscale files; a truncated file is still refused.
  const std::string& dir = images_dir();
  std::mt19937_64 rng(5);
  int64_t pixels = 0, differing = 0;
  int worst = 0;
  // CMYK: decoded whole and cut; "trailer": 8 KiB after the end marker (a motion photo's video),
  // once refused as truncated.
  images_put(dir + "/trailer.jpg", images_slurp(dir + "/photo.jpg") + std::string(8192, '\x11'));
  for (const char* name :
       {"photo.jpg", "photo444.jpg", "progressive.jpg", "grey.jpg", "cmyk.jpg", "trailer.jpg"}) {
    const std::string b = images_slurp(dir + "/" + name);
    const auto* data = reinterpret_cast<const uint8_t*>(b.data());
    for (int eighths : {8, 5, 2}) {
      const DecodedImage whole = decode_image(data, b.size(), eighths);
      for (int k = 0; k < 6; ++k) {
        PixelRegion r;
        r.top = static_cast<int>(rng() % (whole.height / 2));
        r.left = static_cast<int>(rng() % (whole.width / 2));
        r.height = 1 + static_cast<int>(rng() % (whole.height - r.top));
        r.width = 1 + static_cast<int>(rng() % (whole.width - r.left));
        const DecodedImage crop = decode_jpeg_region(data, b.size(), eighths, r);
        ASSERT_LE(crop.left, r.left);
        ASSERT_EQ(crop.top, r.top);
        ASSERT_GE(crop.left + crop.width, r.left + r.width);
        ASSERT_EQ(crop.height, r.height);
        for (int y = 0; y < crop.height; ++y)
          for (int x = 0; x < crop.width * 3; ++x) {
            const int d = std::abs(
                int{crop.rgb[static_cast<size_t>(y) * crop.width * 3 + x]} -
                int{whole.rgb[(static_cast<size_t>(y + crop.top) * whole.width + crop.left) * 3 + x]});
            ++pixels;
            differing += d != 0;
            worst = std::max(worst, d);
          }
      }
    }
  }
  std::printf("JPEG crops: %lld of %lld values differ from the whole decode's, by at most %d\n",
              static_cast<long long>(differing), static_cast<long long>(pixels), worst);
  EXPECT_LT(static_cast<double>(differing), 0.02 * static_cast<double>(pixels));
  EXPECT_LE(worst, 16);
  const std::string jpg = images_slurp(dir + "/photo.jpg");
  // A camera JPEG's EXIF thumbnail ends with its own end marker, in APP1 before the scan: a
  // truncated file with one is still refused (it was taken as whole).
  const std::string app1 = std::string("\xff\xe1\x00\x08", 4) + std::string("Exif\xff\xd9", 6);
  const std::string thumb = jpg.substr(0, 2) + app1 + jpg.substr(2, jpg.size() * 9 / 10);
  try {
    decode_jpeg_region(reinterpret_cast<const uint8_t*>(thumb.data()), thumb.size(), 8, {0, 0, 10, 10});
    ADD_FAILURE() << "a truncated JPEG with a thumbnail's end marker decoded";
  } catch (const ImageError& e) {
    EXPECT_NE(std::string(e.what()).find("Premature end"), std::string::npos) << e.what();
  }
  const std::string cut = jpg.substr(0, jpg.size() * 9 / 10);
  try {
    decode_jpeg_region(reinterpret_cast<const uint8_t*>(cut.data()), cut.size(), 8, {0, 0, 10, 10});
    ADD_FAILURE() << "a truncated JPEG's crop decoded";
  } catch (const ImageError& e) {
    EXPECT_NE(std::string(e.what()).find("Premature end"), std::string::npos) << e.what();
  }
}
