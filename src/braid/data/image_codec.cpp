#include "data/image_codec.h"

// clang-format off: jpeglib.h needs <cstdio> first
#include <jpeglib.h>

#include <cstdio>
// clang-format on
#include <png.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstring>
#include <fstream>
#include <memory>

#include "core/error.h"

namespace braid::data {
namespace {

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  BRAID_CHECK(in.good(), "image '", path, "': cannot open it: ", std::strerror(errno));
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

DecodedImage decode_png(const std::string& path, const std::vector<uint8_t>& bytes, int channels) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (png_image_begin_read_from_memory(&image, bytes.data(), bytes.size()) == 0)
    BRAID_THROW(Error, "image '", path, "': not a PNG libpng can read (", image.message, ")");
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  DecodedImage out{image.height, image.width, channels, {}};
  out.pixels.resize(static_cast<size_t>(PNG_IMAGE_SIZE(image)));
  if (png_image_finish_read(&image, nullptr, out.pixels.data(), 0, nullptr) == 0) {
    const std::string why = image.message;
    png_image_free(&image);
    BRAID_THROW(Error, "image '", path, "': damaged PNG (libpng: ", why, ")");
  }
  return out;
}

// libjpeg reports an error by calling error_exit, which must not return: it jumps back to
// decode_jpeg with the message kept, and the exception is thrown there, outside the library.
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_error_exit(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

// A warning is libjpeg recovering from damage (a truncated file decodes with its missing rows
// gray): kept, not printed, and made an error once decoding ends.
void jpeg_note_warning(j_common_ptr cinfo, int level) {
  if (level >= 0) return;  // trace messages
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  if (e->mgr.num_warnings++ == 0) (*cinfo->err->format_message)(cinfo, e->message);
}

DecodedImage decode_jpeg(const std::string& path, const std::vector<uint8_t>& bytes, int channels) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_error_exit;
  err.mgr.emit_message = jpeg_note_warning;
  // Held through a pointer set before the setjmp and never changed after it, so a longjmp
  // back leaves it determinate (a local changed after a setjmp would not be).
  const auto out = std::make_unique<DecodedImage>();
  if (setjmp(err.jump) != 0) {
    jpeg_destroy_decompress(&cinfo);
    BRAID_THROW(Error, "image '", path, "': damaged JPEG (libjpeg: ", err.message, ")");
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  out->h = cinfo.output_height;
  out->w = cinfo.output_width;
  out->c = cinfo.output_components;
  out->pixels.resize(static_cast<size_t>(out->h * out->w * out->c));
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row =
        out->pixels.data() + static_cast<size_t>(cinfo.output_scanline) * out->w * out->c;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  BRAID_CHECK(err.mgr.num_warnings == 0, "image '", path, "': damaged JPEG (libjpeg: ", err.message,
              ")");
  return std::move(*out);
}

}  // namespace

DecodedImage decode_image(const std::string& path, int channels) {
  BRAID_CHECK(channels == 1 || channels == 3, "image '", path, "': channels must be 1 or 3, got ",
              channels);
  const std::vector<uint8_t> bytes = read_bytes(path);
  static constexpr uint8_t kPng[] = {0x89, 'P', 'N', 'G'};
  if (bytes.size() >= 4 && std::equal(kPng, kPng + 4, bytes.begin()))
    return decode_png(path, bytes, channels);
  if (bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF)
    return decode_jpeg(path, bytes, channels);
  BRAID_THROW(Error, "image '", path, "': neither PNG nor JPEG (its first bytes say neither",
              bytes.empty() ? "; the file is empty" : "", ")");
}

void write_png(const std::string& path, const uint8_t* pixels, int64_t h, int64_t w, int c) {
  BRAID_CHECK(c == 1 || c == 3, "write_png '", path, "': 1 or 3 channels, got ", c);
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(w);
  image.height = static_cast<png_uint_32>(h);
  image.format = c == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  if (png_image_write_to_file(&image, path.c_str(), 0, pixels, 0, nullptr) == 0)
    BRAID_THROW(IoError, "write_png '", path, "': ", image.message);
}

void write_jpeg(const std::string& path, const uint8_t* pixels, int64_t h, int64_t w, int c,
                int quality) {
  BRAID_CHECK(c == 1 || c == 3, "write_jpeg '", path, "': 1 or 3 channels, got ", c);
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  BRAID_CHECK(file != nullptr, "write_jpeg '", path, "': cannot create it: ", std::strerror(errno));
  jpeg_compress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_error_exit;  // a full disk, say: an exception, not exit()
  if (setjmp(err.jump) != 0) {
    jpeg_destroy_compress(&cinfo);
    BRAID_THROW(IoError, "write_jpeg '", path, "': ", err.message);
  }
  jpeg_create_compress(&cinfo);
  jpeg_stdio_dest(&cinfo, file.get());
  cinfo.image_width = static_cast<JDIMENSION>(w);
  cinfo.image_height = static_cast<JDIMENSION>(h);
  cinfo.input_components = c;
  cinfo.in_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(pixels) + static_cast<size_t>(cinfo.next_scanline) * w * c;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
}

void resize_bilinear(const DecodedImage& src, int64_t h, int64_t w, float* dst) {
  const int64_t c = src.c;
  if (src.h == h && src.w == w) {  // the common case: the images already have the size
    for (size_t i = 0; i < src.pixels.size(); ++i) dst[i] = src.pixels[i];
    return;
  }
  const double sy = static_cast<double>(src.h) / static_cast<double>(h);
  const double sx = static_cast<double>(src.w) / static_cast<double>(w);
  // Where each output column samples the source: its two neighbours and the weight of the
  // right one, computed once per column rather than per pixel.
  std::vector<int64_t> x0(static_cast<size_t>(w)), x1(static_cast<size_t>(w));
  std::vector<float> fx(static_cast<size_t>(w));
  for (int64_t x = 0; x < w; ++x) {
    const double at = std::max(0.0, (static_cast<double>(x) + 0.5) * sx - 0.5);
    x0[x] = std::min(static_cast<int64_t>(at), src.w - 1);
    x1[x] = std::min(x0[x] + 1, src.w - 1);
    fx[x] = static_cast<float>(at - static_cast<double>(x0[x]));
  }
  const uint8_t* p = src.pixels.data();
  for (int64_t y = 0; y < h; ++y) {
    const double at = std::max(0.0, (static_cast<double>(y) + 0.5) * sy - 0.5);
    const int64_t y0 = std::min(static_cast<int64_t>(at), src.h - 1);
    const int64_t y1 = std::min(y0 + 1, src.h - 1);
    const float fy = static_cast<float>(at - static_cast<double>(y0));
    const uint8_t* r0 = p + y0 * src.w * c;
    const uint8_t* r1 = p + y1 * src.w * c;
    float* out = dst + y * w * c;
    for (int64_t x = 0; x < w; ++x)
      for (int64_t k = 0; k < c; ++k) {
        const float top = r0[x0[x] * c + k] + fx[x] * (r0[x1[x] * c + k] - r0[x0[x] * c + k]);
        const float bottom = r1[x0[x] * c + k] + fx[x] * (r1[x1[x] * c + k] - r1[x0[x] * c + k]);
        out[x * c + k] = top + fy * (bottom - top);
      }
  }
}

}  // namespace braid::data
