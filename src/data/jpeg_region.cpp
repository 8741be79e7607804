// decode_jpeg_region (data/image_decode.h): a JPEG's crop through libjpeg's own API, which
// TurboJPEG's 2.1 API cannot crop with. libjpeg reports errors by longjmp: the decoding runs in
// one C-style function whose frame holds no object with a destructor after its setjmp.
#include "data/image_decode.h"

// clang-format off
#include <cstdio>  // jpeglib.h needs FILE
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <algorithm>
#include <csetjmp>
#include <cstdlib>

#include "util/strings.h"

namespace ddptrain {
namespace {

struct RegionErrors {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  jpeg_progress_mgr progress;
};

[[noreturn]] void region_fail(j_common_ptr c) {
  auto* e = reinterpret_cast<RegionErrors*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

// TurboJPEG's TJFLAG_LIMITSCANS, which decode_image sets: a progressive file of more than 500
// scans is refused, not decoded for as long as its scans go on (a loader thread stalled).
void region_scan_limit(j_common_ptr c) {
  if (!c->is_decompressor || reinterpret_cast<j_decompress_ptr>(c)->input_scan_number <= 500) return;
  auto* e = reinterpret_cast<RegionErrors*>(c->err);
  std::snprintf(e->message, sizeof e->message, "Progressive JPEG image has more than 500 scans");
  std::longjmp(e->jump, 1);
}

// Warnings pass (as in decode_image) but a premature end, an error there too.
void region_message(j_common_ptr c, int level) {
  if (level >= 0 || c->err->msg_code != JWRN_JPEG_EOF) return;
  region_fail(c);
}

struct RegionResult {
  unsigned char* pixels = nullptr;  // malloc'ed: height x width x 3
  int top = 0, left = 0, height = 0, width = 0;
};

// The decode itself; false with e.message set on an error. Between setjmp and a longjmp only
// plain data changes (`out` lives in the caller's frame).
bool decode_region_c(const uint8_t* data, size_t size, int eighths, PixelRegion want, RegionErrors& e,
                     RegionResult& out) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&e.mgr);
  e.mgr.error_exit = region_fail;
  e.mgr.emit_message = region_message;
  jpeg_create_decompress(&cinfo);
  if (setjmp(e.jump) != 0) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  cinfo.progress = &e.progress;
  e.progress.progress_monitor = region_scan_limit;
  jpeg_read_header(&cinfo, TRUE);  // CMYK took decode_image's path, before
  cinfo.scale_num = static_cast<unsigned>(eighths);
  cinfo.scale_denom = 8;
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  const int H = static_cast<int>(cinfo.output_height), W = static_cast<int>(cinfo.output_width);
  const int top = std::clamp(want.top, 0, H - 1), bottom = std::clamp(want.top + want.height, top + 1, H);
  JDIMENSION left = static_cast<JDIMENSION>(std::clamp(want.left, 0, W - 1));
  JDIMENSION width =
      static_cast<JDIMENSION>(std::clamp(want.left + want.width, static_cast<int>(left) + 1, W)) - left;
  if (left > 0 || width < static_cast<JDIMENSION>(W)) jpeg_crop_scanline(&cinfo, &left, &width);
  out.pixels = static_cast<unsigned char*>(std::malloc(static_cast<size_t>(width) * 3 * (bottom - top)));
  if (out.pixels == nullptr) {
    std::snprintf(e.message, sizeof e.message, "out of memory for a %ux%d crop", width, bottom - top);
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  out.top = top;
  out.left = static_cast<int>(left);
  out.width = static_cast<int>(width);
  out.height = bottom - top;
  if (top > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(top));
  while (static_cast<int>(cinfo.output_scanline) < bottom) {
    JSAMPROW row = out.pixels + static_cast<size_t>(cinfo.output_scanline - top) * width * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_abort_decompress(&cinfo);  // the rows below are not needed
  jpeg_destroy_decompress(&cinfo);
  return true;
}

// Where the first scan starts (its SOS marker), by the header segments' lengths; 2 when the
// walk goes astray (then the whole file is searched).
size_t first_scan(const uint8_t* data, size_t size) {
  size_t i = 2;
  while (i + 4 <= size && data[i] == 0xff) {
    if (data[i + 1] == 0xff) {  // a fill byte before a marker
      ++i;
      continue;
    }
    if (data[i + 1] == 0xda) return i;
    i += 2 + ((static_cast<size_t>(data[i + 2]) << 8) | data[i + 3]);
  }
  return 2;
}

// A whole JPEG has its EOI marker (0xFF 0xD9) after its scans, perhaps followed by padding or
// another file (a phone's motion photo appends a video): searched from the end back to the
// first scan (in the entropy-coded data 0xFF is followed by 0x00 or a restart marker, never
// 0xD9). Not before it: an EXIF thumbnail in APP1 ends with its own EOI, which made a
// truncated camera JPEG look whole.
bool has_end_marker(const uint8_t* data, size_t size) {
  const size_t from = first_scan(data, size);
  for (size_t i = size; i-- > from + 1;)
    if (data[i - 1] == 0xff && data[i] == 0xd9) return true;
  return false;
}

// A CMYK JPEG's region: decoded whole (converted as Pillow does), then cut to the region clipped
// as decode_region_c clips it.
DecodedImage cmyk_region(const uint8_t* data, size_t size, int eighths, PixelRegion want) {
  DecodedImage whole = decode_image(data, size, eighths);
  const int H = whole.height, W = whole.width;
  const int top = std::clamp(want.top, 0, H - 1), bottom = std::clamp(want.top + want.height, top + 1, H);
  const int left = std::clamp(want.left, 0, W - 1), right = std::clamp(want.left + want.width, left + 1, W);
  DecodedImage out;
  out.top = top;
  out.left = left;
  out.height = bottom - top;
  out.width = right - left;
  out.rgb.resize(static_cast<size_t>(out.width) * out.height * 3);
  for (int y = 0; y < out.height; ++y)
    std::copy_n(&whole.rgb[(static_cast<size_t>(top + y) * W + left) * 3], static_cast<size_t>(out.width) * 3,
                &out.rgb[static_cast<size_t>(y) * out.width * 3]);
  return out;
}

}  // namespace

DecodedImage decode_jpeg_region(const uint8_t* data, size_t size, int eighths, PixelRegion region) {
  if (eighths < 1 || eighths > 8) throw ImageError(str("decode scale ", eighths, "/8 is not in 1/8..8/8"));
  if (sniff_image(data, size) != ImageFormat::kJpeg) throw ImageError("not a JPEG (by its first bytes)");
  image_size(data, size);  // decode_image's header checks: the pixel limit
  if (is_cmyk_jpeg(data, size)) return cmyk_region(data, size, eighths, region);
  if (!has_end_marker(data, size)) throw ImageError("JPEG data: Premature end of JPEG file (no end marker)");
  RegionErrors e{};
  RegionResult r;
  if (!decode_region_c(data, size, eighths, region, e, r)) {
    std::free(r.pixels);
    throw ImageError(str("JPEG data: ", e.message));
  }
  DecodedImage out;
  out.width = r.width;
  out.height = r.height;
  out.top = r.top;
  out.left = r.left;
  out.rgb.assign(r.pixels, r.pixels + static_cast<size_t>(r.width) * r.height * 3);
  std::free(r.pixels);
  return out;
}

}  // namespace ddptrain
