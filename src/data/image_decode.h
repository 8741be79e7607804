// Image files to RGB pixels: JPEG by libjpeg-turbo (its TurboJPEG API, with its DCT scaling:
// a JPEG decodes straight to 1/8 .. 8/8 of its size), PNG by libpng (its simplified API).
// No LibTorch here: the image folder (data/image_folder.h) and the fuzz loop call it.
// Every failure is an ImageError with the decoder's reason, never a crash: a truncated or
// corrupt file (libjpeg-turbo's warnings count as errors: a truncated JPEG would otherwise
// decode as grey), a format other than JPEG/PNG, a CMYK JPEG, or more than kMaxImagePixels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddptrain {

/// A file that does not decode; what() is the reason (the caller names the file).
class ImageError : public std::runtime_error {
 public:
  explicit ImageError(const std::string& reason) : std::runtime_error(reason) {}
};

enum class ImageFormat { kUnknown, kJpeg, kPng };

/// The format by the file's first bytes (not its name).
ImageFormat sniff_image(const uint8_t* data, size_t size);

/// Pillow's limit for a decompression bomb (twice its warning threshold): larger images are refused.
inline constexpr int64_t kMaxImagePixels = 178956970;

struct ImageSize {
  int width = 0;
  int height = 0;
};

/// Width and height from the header alone; ImageError for a file that is not a JPEG or PNG.
ImageSize image_size(const uint8_t* data, size_t size);

/// Whether a JPEG's pixels are CMYK (or YCCK): decoded whole, then converted as Pillow does.
bool is_cmyk_jpeg(const uint8_t* data, size_t size);

/// A JPEG's size decoded at eighths/8 of full size (libjpeg-turbo rounds up: ceil(n·eighths/8)).
inline int scaled_dim(int n, int eighths) { return (n * eighths + 7) / 8; }

struct DecodedImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // height x width x 3, row-major
  int top = 0, left = 0;     // where these pixels lie in the whole (scaled) image (a region's)
};

/// Rows [top, top + height) and columns [left, left + width) of an image.
struct PixelRegion {
  int top = 0, left = 0, height = 0, width = 0;
};

/// Decodes to 8-bit RGB (grey replicated, alpha dropped). A JPEG is decoded at eighths/8 of its
/// size (1..8); a PNG always at full size.
DecodedImage decode_image(const uint8_t* data, size_t size, int eighths = 8);

/// Only `region` of a JPEG decoded at eighths/8 (region in the scaled image's pixels, clipped
/// to it), through libjpeg's API: the rows above are skipped, those below not decoded, the
/// columns cropped (libjpeg widens the crop to its iMCU columns: the result's left and width
/// say what was decoded). The pixels equal the whole decode's but for a column at a widened
/// crop's edge, where chroma upsampling lacks its neighbour. A file whose end marker is
/// missing (truncated) is an error, as in decode_image, though its rows below the region are
/// not read; corrupt data there goes unseen.
DecodedImage decode_jpeg_region(const uint8_t* data, size_t size, int eighths, PixelRegion region);

}  // namespace ddptrain
