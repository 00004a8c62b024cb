// Image transforms that write one NHWC float image into a caller's buffer: normalisation of
// u8 pixels, (x / 255 - mean) / std, optionally with a random crop from a zero-padded
// image and a random horizontal flip (the torchvision recipe RandomCrop(padding=p) then
// RandomHorizontalFlip, applied before normalisation: padding is pixel value 0, so it
// becomes -mean / std after normalising).
//
// The random choice is drawn first (draw_crop_flip: crop offsets, then the flip) and then
// applied in a single pass, so each destination value is written once and no temporary
// image is needed.
#pragma once

#include <array>
#include <cstdint>

#include "core/rng.h"
#include "data/dataset.h"

namespace braid::data {

struct Normalize {
  float mean = 0.2860f;  // Fashion-MNIST train set statistics
  float std = 0.3530f;
};

// The 256 normalised values, so per-pixel work is one table lookup.
struct PixelTable {
  explicit PixelTable(const Normalize& n);
  std::array<float, 256> value;
};

// dst[i] = (src[i] / 255 - mean) / std for i < count.
void normalize_u8(const uint8_t* src, int64_t count, const Normalize& n, float* dst);

struct ImageGeometry {
  int64_t h = 0, w = 0, c = 0;
};

// Where the crop lands in the image padded by `pad` on every side (dy, dx in [0, 2 pad]),
// and whether the crop is mirrored left-right. The identity is {0, 0, 0, false}.
struct CropFlip {
  int64_t pad = 0, dy = 0, dx = 0;
  bool flip = false;
};

// Draws crop offsets (two below(2p+1) calls, only when crop_pad > 0), then the flip (one
// word, only when flip is on).
CropFlip draw_crop_flip(const AugmentOptions& options, Rng& rng);

// dst(y, x, ch) = table[src(y + dy - pad, x' + dx - pad, ch)] with x' = W-1-x when flipped,
// table[0] outside the image. src and dst are HWC.
void transform_u8(const uint8_t* src, const ImageGeometry& g, const PixelTable& table,
                  const CropFlip& cf, float* dst);
// The same geometry for float images, padding with 0.0f.
void transform_f32(const float* src, const ImageGeometry& g, const CropFlip& cf, float* dst);

// Random erasing as torchvision.transforms.RandomErasing(p, scale=(0.02, 0.33),
// ratio=(0.3, 3.3), value=0) after normalisation: with probability p, a rectangle of
// 2-33 % of the image with aspect ratio (log-uniform) 0.3-3.3 is set to 0, the dataset mean.
// Up to 10 draws look for a rectangle that fits; if none does, nothing is erased.
struct EraseBox {
  int64_t y = 0, x = 0, h = 0, w = 0;  // h == 0: nothing to erase
};
// Draws after draw_crop_flip from the same generator (one word, plus up to 10 x 4 words
// when erasing); draws nothing when options.erase is 0.
EraseBox draw_erase(const AugmentOptions& options, const ImageGeometry& g, Rng& rng);
// Zeroes the box in every channel of an HWC image.
void erase(const EraseBox& box, const ImageGeometry& g, float* image);

}  // namespace braid::data
