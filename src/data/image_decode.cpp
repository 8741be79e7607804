#include "data/image_decode.h"

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <climits>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

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
  check_pixels(w, hh, "JPEG");
  return {{w, hh}, cs};
}

// Whether an Adobe APP14 segment precedes the scan: its CMYK is stored inverted (Photoshop's
// convention), which Pillow undoes ("CMYK;I") before its conversion.
bool has_adobe_marker(const uint8_t* data, size_t size) {
  size_t i = 2;
  while (i + 4 <= size && data[i] == 0xff) {
    const uint8_t marker = data[i + 1];
    if (marker == 0xda || marker == 0xd9) break;  // the scan (or the end): no more headers
    const size_t len = (static_cast<size_t>(data[i + 2]) << 8) | data[i + 3];
    if (marker == 0xee && len >= 7 && i + 9 <= size && std::memcmp(data + i + 4, "Adobe", 5) == 0)
      return true;
    i += 2 + len;
  }
  return false;
}

// Pillow's CMYK to RGB (Convert.c's cmyk2rgb): each channel (255 - K) less C (or M, Y) scaled
// by it, in its rounding.
uint8_t pillow_cmyk_channel(int c, int nk) {
  const int t = c * nk + 128;
  return static_cast<uint8_t>(std::clamp(nk - (((t >> 8) + t) >> 8), 0, 255));
}

// A CMYK (or YCCK) JPEG as Pillow's convert("RGB") makes it (before, refused: ImageNet's train
// split holds 22 such files, and a run stopped at the first its order reached).
void cmyk_to_rgb(const std::vector<uint8_t>& cmyk, bool adobe, std::vector<uint8_t>& rgb) {
  const size_t n = cmyk.size() / 4;
  rgb.resize(n * 3);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = &cmyk[4 * i];
    const int c = adobe ? 255 - p[0] : p[0], m = adobe ? 255 - p[1] : p[1], y = adobe ? 255 - p[2] : p[2];
    const int nk = 255 - (adobe ? 255 - p[3] : p[3]);
    rgb[3 * i] = pillow_cmyk_channel(c, nk);
    rgb[3 * i + 1] = pillow_cmyk_channel(m, nk);
    rgb[3 * i + 2] = pillow_cmyk_channel(y, nk);
  }
}

DecodedImage decode_jpeg(const uint8_t* data, size_t size, int eighths) {
  TjHandle tj;
  const JpegHeader hd = jpeg_header(tj.h, data, size);
  DecodedImage out;
  out.width = scaled_dim(hd.size.width, eighths);
  out.height = scaled_dim(hd.size.height, eighths);
  const bool cmyk = hd.colorspace == TJCS_CMYK || hd.colorspace == TJCS_YCCK;
  const int channels = cmyk ? 4 : 3;
  std::vector<uint8_t> pixels(static_cast<size_t>(out.width) * out.height * channels);
  // The scan limit stops a progressive file of endless scans (a decoder hang). A warning is
  // an error when it is a truncated file (which libjpeg would finish in grey), as Pillow refuses
  // one; other warnings (extraneous bytes before a marker) pass, as in Pillow.
  if (tjDecompress2(tj.h, data, static_cast<unsigned long>(size), pixels.data(), out.width,
                    out.width * channels, out.height, cmyk ? TJPF_CMYK : TJPF_RGB, TJFLAG_LIMITSCANS) != 0) {
    const std::string why = tjGetErrorStr2(tj.h);
    if (tjGetErrorCode(tj.h) != TJERR_WARNING || why.find("Premature end") != std::string::npos)
      throw ImageError(str("JPEG data: ", why));
  }
  if (cmyk)
    cmyk_to_rgb(pixels, has_adobe_marker(data, size), out.rgb);
  else
    out.rgb = std::move(pixels);
  return out;
}

// libpng's own API, as Pillow reads a PNG (its convert("RGB")): samples as stored, no gamma or
// colour management (the simplified API treated 16-bit samples without a gAMA chunk as linear
// light and brightened them, and applied a file's gamma: Pillow does neither); 16-bit samples
// by their high byte, a 16-bit greyscale image clipped to 255 (Pillow's I;16 to RGB), alpha and
// tRNS dropped, palettes and greyscale expanded. libpng reports errors by longjmp: the decode
// runs in one C-style function whose frame holds no object with a destructor after its setjmp.
struct PngErrors {
  std::jmp_buf jump;
  char message[256];
};

struct PngSource {
  const uint8_t* data;
  size_t size, pos;
};

[[noreturn]] void png_fail(png_structp p, png_const_charp msg) {
  auto* e = static_cast<PngErrors*>(png_get_error_ptr(p));
  std::snprintf(e->message, sizeof e->message, "%s", msg);
  std::longjmp(e->jump, 1);
}

void png_ignore_warning(png_structp, png_const_charp) {}

void png_read_memory(png_structp p, png_bytep out, size_t n) {
  auto* s = static_cast<PngSource*>(png_get_io_ptr(p));
  if (n > s->size - s->pos) png_error(p, "the file ends early (truncated)");
  std::memcpy(out, s->data + s->pos, n);
  s->pos += n;
}

struct PngResult {
  unsigned char* pixels = nullptr;  // malloc'ed: height rows of row_bytes
  size_t row_bytes = 0;
  int width = 0, height = 0;
  png_bytepp rows = nullptr;  // malloc'ed: pointers into pixels
  int channels = 3;           // per pixel in pixels (4: a palette's tRNS that libpng expands to alpha)
  bool grey16 = false;        // pixels are 16-bit big-endian greyscale samples
  bool header_read = false;
};

// header_only: the size only. False with e.message set on an error.
bool decode_png_c(const uint8_t* data, size_t size, bool header_only, PngErrors& e, PngResult& out) {
  PngSource src{data, size, 0};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &e, png_fail, png_ignore_warning);
  if (png == nullptr) {
    std::snprintf(e.message, sizeof e.message, "libpng could not start a reader");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    std::snprintf(e.message, sizeof e.message, "libpng could not start a reader");
    png_destroy_read_struct(&png, nullptr, nullptr);
    return false;
  }
  if (setjmp(e.jump) != 0) {  // out (the caller's) holds what must be freed
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_set_read_fn(png, &src, png_read_memory);
  png_read_info(png, info);
  out.width = static_cast<int>(png_get_image_width(png, info));
  out.height = static_cast<int>(png_get_image_height(png, info));
  out.header_read = true;
  if (header_only || static_cast<int64_t>(out.width) * out.height > kMaxImagePixels) {
    png_destroy_read_struct(&png, &info, nullptr);
    return true;  // the caller checks the size
  }
  const int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  out.grey16 = color == PNG_COLOR_TYPE_GRAY && depth == 16;
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);  // a tRNS becomes alpha: dropped below
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16 && !out.grey16) png_set_strip_16(png);  // the high byte
  if ((color & PNG_COLOR_MASK_ALPHA) != 0) png_set_strip_alpha(png);
  if ((color & PNG_COLOR_MASK_COLOR) == 0 && !out.grey16) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  out.channels = png_get_channels(png, info);
  out.row_bytes = png_get_rowbytes(png, info);
  out.pixels = static_cast<unsigned char*>(std::malloc(out.row_bytes * static_cast<size_t>(out.height)));
  out.rows = static_cast<png_bytepp>(std::malloc(sizeof(png_bytep) * static_cast<size_t>(out.height)));
  if (out.pixels == nullptr || out.rows == nullptr) png_error(png, "out of memory for the image");
  for (int y = 0; y < out.height; ++y) out.rows[y] = out.pixels + static_cast<size_t>(y) * out.row_bytes;
  png_read_image(png, out.rows);
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

PngResult read_png(const uint8_t* data, size_t size, bool header_only) {
  PngErrors e{};
  PngResult r;
  const bool ok = decode_png_c(data, size, header_only, e, r);
  std::free(r.rows);
  r.rows = nullptr;
  if (!ok) {
    std::free(r.pixels);
    throw ImageError(str(r.header_read ? "PNG data: " : "PNG header: ", e.message));
  }
  try {
    check_pixels(r.width, r.height, "PNG");
  } catch (...) {
    std::free(r.pixels);
    throw;
  }
  return r;
}

DecodedImage decode_png(const uint8_t* data, size_t size) {
  PngResult r = read_png(data, size, false);
  DecodedImage out;
  out.width = r.width;
  out.height = r.height;
  const size_t n = static_cast<size_t>(r.width) * r.height;
  out.rgb.resize(n * 3);
  const size_t c = static_cast<size_t>(r.channels);
  for (int y = 0; y < r.height; ++y) {
    const unsigned char* row = r.pixels + static_cast<size_t>(y) * r.row_bytes;
    uint8_t* dst = &out.rgb[static_cast<size_t>(y) * r.width * 3];
    for (size_t x = 0; x < static_cast<size_t>(r.width); ++x) {
      if (!r.grey16) {
        std::memcpy(dst + 3 * x, row + c * x, 3);
        continue;
      }
      const int v = (row[2 * c * x] << 8) | row[2 * c * x + 1];
      dst[3 * x] = dst[3 * x + 1] = dst[3 * x + 2] = static_cast<uint8_t>(std::min(v, 255));
    }
  }
  std::free(r.pixels);
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
      const PngResult r = read_png(data, size, /*header_only=*/true);
      return {r.width, r.height};
    }
    case ImageFormat::kUnknown:
      break;
  }
  not_an_image(size);
}

bool is_cmyk_jpeg(const uint8_t* data, size_t size) {
  if (sniff_image(data, size) != ImageFormat::kJpeg) return false;
  TjHandle tj;
  const int cs = jpeg_header(tj.h, data, size).colorspace;
  return cs == TJCS_CMYK || cs == TJCS_YCCK;
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
