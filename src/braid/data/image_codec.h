// Decoding PNG and JPEG files into 8-bit pixels, with Debian's libpng (its simplified API)
// and libjpeg-turbo, and resizing them to a training geometry. The loader's worker threads
// call these (data/image_folder.h), never the training thread.
//
// A damaged or truncated file, or one that is neither format, is an Error naming the file
// and what the library said; nothing is half-written.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace braid::data {

struct DecodedImage {
  int64_t h = 0, w = 0, c = 0;  // c: 1 (gray) or 3 (RGB)
  std::vector<uint8_t> pixels;  // HWC
};

// The file's pixels with `channels` channels (1: gray, 3: RGB), converted as the libraries
// do (RGB to gray by their luminance weights, gray to RGB by copying). The format is told by
// the file's first bytes, not its name.
DecodedImage decode_image(const std::string& path, int channels);

// Writes HWC pixels (c: 1 or 3) as a PNG, or a JPEG of `quality` (1-100): image folders made
// from other data, and test and benchmark images. An Error naming the file when it cannot.
void write_png(const std::string& path, const uint8_t* pixels, int64_t h, int64_t w, int c);
void write_jpeg(const std::string& path, const uint8_t* pixels, int64_t h, int64_t w, int c,
                int quality);

// Bilinear resize to h x w (pixel centres aligned, as torch's interpolate with
// align_corners=False and no antialiasing), written as floats in [0, 255] into dst (HWC).
void resize_bilinear(const DecodedImage& src, int64_t h, int64_t w, float* dst);

}  // namespace braid::data
