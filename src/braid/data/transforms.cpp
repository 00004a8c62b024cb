// Normalisation, crop and flip in one pass per image.
#include "data/transforms.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace braid::data {
namespace {

// Writes dst from src under the crop/flip geometry; map converts one source value.
template <typename T, typename Map>
void apply_crop_flip(const T* src, const ImageGeometry& g, const CropFlip& cf, float pad_value,
                     Map map, float* dst) {
  const int64_t H = g.h, W = g.w, C = g.c, row = W * C;
  const int64_t oy = cf.dy - cf.pad, ox = cf.dx - cf.pad;
  if (oy == 0 && ox == 0 && !cf.flip) {
    for (int64_t i = 0; i < H * row; ++i) dst[i] = map(src[i]);
    return;
  }
  for (int64_t y = 0; y < H; ++y) {
    float* out = dst + y * row;
    const int64_t sy = y + oy;
    if (sy < 0 || sy >= H) {
      std::fill(out, out + row, pad_value);
      continue;
    }
    const T* in = src + sy * row;
    for (int64_t x = 0; x < W; ++x) {
      const int64_t sx = (cf.flip ? W - 1 - x : x) + ox;
      float* o = out + x * C;
      if (sx < 0 || sx >= W) {
        std::fill(o, o + C, pad_value);
      } else {
        const T* p = in + sx * C;
        for (int64_t ch = 0; ch < C; ++ch) o[ch] = map(p[ch]);
      }
    }
  }
}

void check_geometry(const ImageGeometry& g, const CropFlip& cf) {
  BRAID_CHECK(g.h > 0 && g.w > 0 && g.c > 0, "bad image geometry ", g.h, "x", g.w, "x", g.c);
  BRAID_CHECK(cf.pad >= 0 && cf.dy >= 0 && cf.dy <= 2 * cf.pad && cf.dx >= 0 && cf.dx <= 2 * cf.pad,
              "crop offsets (", cf.dy, ", ", cf.dx, ") outside [0, ", 2 * cf.pad, "]");
}

}  // namespace

PixelTable::PixelTable(const Normalize& n) {
  BRAID_CHECK(n.std > 0, "normalisation std must be positive, got ", n.std);
  for (int v = 0; v < 256; ++v) value[v] = (static_cast<float>(v) / 255.0f - n.mean) / n.std;
}

void normalize_u8(const uint8_t* src, int64_t count, const Normalize& n, float* dst) {
  const PixelTable table(n);
  for (int64_t i = 0; i < count; ++i) dst[i] = table.value[src[i]];
}

CropFlip draw_crop_flip(const AugmentOptions& options, Rng& rng) {
  BRAID_CHECK(options.crop_pad >= 0, "crop padding must be >= 0, got ", options.crop_pad);
  CropFlip cf;
  cf.pad = options.crop_pad;
  cf.dy = cf.dx = cf.pad;
  if (cf.pad > 0) {
    const auto span = static_cast<uint64_t>(2 * cf.pad + 1);
    cf.dy = static_cast<int64_t>(rng.below(span));
    cf.dx = static_cast<int64_t>(rng.below(span));
  }
  if (options.flip) cf.flip = (rng.next_u32() >> 31) != 0;
  return cf;
}

void transform_u8(const uint8_t* src, const ImageGeometry& g, const PixelTable& table,
                  const CropFlip& cf, float* dst) {
  check_geometry(g, cf);
  apply_crop_flip(
      src, g, cf, table.value[0], [&](uint8_t v) { return table.value[v]; }, dst);
}

void transform_f32(const float* src, const ImageGeometry& g, const CropFlip& cf, float* dst) {
  check_geometry(g, cf);
  apply_crop_flip(
      src, g, cf, 0.0f, [](float v) { return v; }, dst);
}

EraseBox draw_erase(const AugmentOptions& options, const ImageGeometry& g, Rng& rng) {
  BRAID_CHECK(options.erase >= 0.0f && options.erase <= 1.0f,
              "random erasing probability must be in [0, 1], got ", options.erase);
  if (options.erase == 0.0f || rng.uniform() >= options.erase) return {};
  constexpr float kMinArea = 0.02f, kMaxArea = 0.33f;
  const float log_min_ratio = std::log(0.3f), log_max_ratio = std::log(3.3f);
  const auto area = static_cast<float>(g.h * g.w);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const float target = area * rng.uniform(kMinArea, kMaxArea);
    const float ratio = std::exp(rng.uniform(log_min_ratio, log_max_ratio));
    const auto h = static_cast<int64_t>(std::lround(std::sqrt(target * ratio)));
    const auto w = static_cast<int64_t>(std::lround(std::sqrt(target / ratio)));
    if (h < 1 || w < 1 || h >= g.h || w >= g.w) continue;
    EraseBox box{.h = h, .w = w};
    box.y = static_cast<int64_t>(rng.below(static_cast<uint64_t>(g.h - h + 1)));
    box.x = static_cast<int64_t>(rng.below(static_cast<uint64_t>(g.w - w + 1)));
    return box;
  }
  return {};
}

void erase(const EraseBox& box, const ImageGeometry& g, float* image) {
  if (box.h == 0) return;
  BRAID_CHECK(box.y >= 0 && box.x >= 0 && box.w > 0 && box.y + box.h <= g.h && box.x + box.w <= g.w,
              "erase box ", box.h, "x", box.w, " at (", box.y, ", ", box.x, ") outside the ", g.h,
              "x", g.w, " image");
  for (int64_t y = box.y; y < box.y + box.h; ++y) {
    float* row = image + (y * g.w + box.x) * g.c;
    std::fill(row, row + box.w * g.c, 0.0f);
  }
}

}  // namespace braid::data
