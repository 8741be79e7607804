#include "data/image_decode.h"

#include <png.h>
#include <turbojpeg.h>

#include <climits>
#include <cstring>
#include <memory>

#include "util/strings.h"

namespace ddptrain {
namespace {

constexpr uint8_t kPngMagic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

// One TurboJPEG decompressor, destroyed on every path.
struct TjHandle {
  tjhandle h = tjInitDecompress();
  TjHandle() {
    if (h == nullptr)
      throw ImageError(str("libjpeg-turbo could not start a decompressor: ", tjGetErrorStr2(nullptr)));
  }
  ~TjHandle() { tjDestroy(h); }
  TjHandle(const TjHandle&) = delete;
  TjHandle& operator=(const TjHandle&) = delete;
};

void check_pixels(int64_t width, int64_t height, const char* format) {
  if (width <= 0 || height <= 0) throw ImageError(str(format, " of ", width, "x", height, " pixels"));
  if (width * height > kMaxImagePixels)
    throw ImageError(str(format, " of ", width, "x", height, " pixels is over ", kMaxImagePixels,
                         " pixels (Pillow's decompression-bomb limit)"));
}

struct JpegHeader {
  ImageSize size;
  int colorspace = 0;
};

JpegHeader jpeg_header(tjhandle h, const uint8_t* data, size_t size) {
  if (size > ULONG_MAX) throw ImageError("JPEG over 4 GiB");
  int w = 0, hh = 0, subsamp = 0, cs = 0;
  if (tjDecompressHeader3(h, data, static_cast<unsigned long>(size), &w, &hh, &subsamp, &cs) != 0)
    throw ImageError(str("JPEG header: ", tjGetErrorStr2(h)));
  if (cs == TJCS_CMYK || cs == TJCS_YCCK)
    throw ImageError("CMYK JPEG (only RGB and greyscale are read): convert it to RGB");
  check_pixels(w, hh, "JPEG");
  return {{w, hh}, cs};
}

DecodedImage decode_jpeg(const uint8_t* data, size_t size, int eighths) {
  TjHandle tj;
  const JpegHeader hd = jpeg_header(tj.h, data, size);
  DecodedImage out;
  out.width = scaled_dim(hd.size.width, eighths);
  out.height = scaled_dim(hd.size.height, eighths);
  out.rgb.resize(static_cast<size_t>(out.width) * out.height * 3);
  // The scan limit stops a progressive file of endless scans (a decoder hang). A warning is
  // an error when it is a truncated file (which libjpeg would finish in grey), as Pillow refuses
  // one; other warnings (extraneous bytes before a marker) pass, as in Pillow.
  if (tjDecompress2(tj.h, data, static_cast<unsigned long>(size), out.rgb.data(), out.width, out.width * 3,
                    out.height, TJPF_RGB, TJFLAG_LIMITSCANS) != 0) {
    const std::string why = tjGetErrorStr2(tj.h);
    if (tjGetErrorCode(tj.h) != TJERR_WARNING || why.find("Premature end") != std::string::npos)
      throw ImageError(str("JPEG data: ", why));
  }
  return out;
}

// libpng's simplified reader, freed on every path.
struct PngReader {
  png_image image;
  PngReader(const uint8_t* data, size_t size) {
    std::memset(&image, 0, sizeof(image));
    image.version = PNG_IMAGE_VERSION;
    if (png_image_begin_read_from_memory(&image, data, size) == 0)
      throw ImageError(str("PNG header: ", image.message));
  }
  ~PngReader() { png_image_free(&image); }
  PngReader(const PngReader&) = delete;
  PngReader& operator=(const PngReader&) = delete;
};

DecodedImage decode_png(const uint8_t* data, size_t size) {
  PngReader r(data, size);
  check_pixels(r.image.width, r.image.height, "PNG");
  // Alpha is read and dropped (as Pillow's convert("RGB")), not composited onto a background.
  const bool alpha = (r.image.format & PNG_FORMAT_FLAG_ALPHA) != 0;
  r.image.format = alpha ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB;
  std::vector<uint8_t> pixels(PNG_IMAGE_SIZE(r.image));
  if (png_image_finish_read(&r.image, nullptr, pixels.data(), 0, nullptr) == 0)
    throw ImageError(str("PNG data: ", r.image.message));
  DecodedImage out;
  out.width = static_cast<int>(r.image.width);
  out.height = static_cast<int>(r.image.height);
  if (!alpha) {
    out.rgb = std::move(pixels);
    return out;
  }
  const size_t n = static_cast<size_t>(out.width) * out.height;
  out.rgb.resize(n * 3);
  for (size_t i = 0; i < n; ++i) std::memcpy(&out.rgb[3 * i], &pixels[4 * i], 3);
  return out;
}

}  // namespace

ImageFormat sniff_image(const uint8_t* data, size_t size) {
  if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) return ImageFormat::kJpeg;
  if (size >= sizeof(kPngMagic) && std::memcmp(data, kPngMagic, sizeof(kPngMagic)) == 0)
    return ImageFormat::kPng;
  return ImageFormat::kUnknown;
}

namespace {
[[noreturn]] void not_an_image(size_t size) {
  throw ImageError(size == 0 ? std::string("empty file") : "neither JPEG nor PNG (by its first bytes)");
}
}  // namespace

ImageSize image_size(const uint8_t* data, size_t size) {
  switch (sniff_image(data, size)) {
    case ImageFormat::kJpeg: {
      TjHandle tj;
      return jpeg_header(tj.h, data, size).size;
    }
    case ImageFormat::kPng: {
      PngReader r(data, size);
      check_pixels(r.image.width, r.image.height, "PNG");
      return {static_cast<int>(r.image.width), static_cast<int>(r.image.height)};
    }
    case ImageFormat::kUnknown:
      break;
  }
  not_an_image(size);
}

DecodedImage decode_image(const uint8_t* data, size_t size, int eighths) {
  if (eighths < 1 || eighths > 8) throw ImageError(str("decode scale ", eighths, "/8 is not in 1/8..8/8"));
  switch (sniff_image(data, size)) {
    case ImageFormat::kJpeg:
      return decode_jpeg(data, size, eighths);
    case ImageFormat::kPng:
      return decode_png(data, size);
    case ImageFormat::kUnknown:
      break;
  }
  not_an_image(size);
}

}  // namespace ddptrain
