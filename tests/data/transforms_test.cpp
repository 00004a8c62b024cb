#include "data/transforms.h"

#include <gtest/gtest.h>

#include <set>

#include "core/error.h"

namespace braid::data {
namespace {

float norm(int v, const Normalize& n = {}) {
  return (static_cast<float>(v) / 255.0f - n.mean) / n.std;
}

TEST(Transforms, NormalizeMatchesFormula) {
  const uint8_t src[] = {0, 1, 128, 255};
  float dst[4];
  normalize_u8(src, 4, Normalize{}, dst);
  EXPECT_FLOAT_EQ(dst[0], -0.2860f / 0.3530f);
  EXPECT_FLOAT_EQ(dst[3], (1.0f - 0.2860f) / 0.3530f);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(dst[i], norm(src[i]));
  const Normalize custom{0.5f, 0.25f};
  normalize_u8(src, 4, custom, dst);
  EXPECT_FLOAT_EQ(dst[3], 2.0f);
  EXPECT_FLOAT_EQ(dst[0], -2.0f);
  EXPECT_THROW(PixelTable(Normalize{0.f, 0.f}), Error);
}

// A 3x4 two-channel image with value 10*y + x + 100*ch.
std::vector<uint8_t> image() {
  std::vector<uint8_t> v(3 * 4 * 2);
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 4; ++x)
      for (int c = 0; c < 2; ++c)
        v[static_cast<size_t>((y * 4 + x) * 2 + c)] = static_cast<uint8_t>(10 * y + x + 100 * c);
  return v;
}

TEST(Transforms, IdentityFlipAndCropByHand) {
  const auto src = image();
  const ImageGeometry g{3, 4, 2};
  const Normalize n{0.f, 1.f / 255.f};  // table(v) == v, so expectations read as pixels
  const PixelTable table(n);
  std::vector<float> dst(src.size());
  auto at = [&](int y, int x, int c) { return dst[static_cast<size_t>((y * 4 + x) * 2 + c)]; };

  transform_u8(src.data(), g, table, CropFlip{}, dst.data());
  for (size_t i = 0; i < src.size(); ++i) EXPECT_FLOAT_EQ(dst[i], src[i]);

  transform_u8(src.data(), g, table, CropFlip{.flip = true}, dst.data());
  EXPECT_FLOAT_EQ(at(0, 0, 0), 3);  // row 0 reversed: 3 2 1 0
  EXPECT_FLOAT_EQ(at(0, 3, 0), 0);
  EXPECT_FLOAT_EQ(at(2, 1, 1), 122);  // y=2, x'=2, channel 1

  // Pad 1, window at (dy, dx) = (0, 2): shifted down by one and left by one.
  transform_u8(src.data(), g, table, CropFlip{.pad = 1, .dy = 0, .dx = 2}, dst.data());
  for (int x = 0; x < 4; ++x) EXPECT_FLOAT_EQ(at(0, x, 0), 0);  // padding row
  EXPECT_FLOAT_EQ(at(1, 0, 0), 1);                              // src(0, 1)
  EXPECT_FLOAT_EQ(at(2, 2, 1), 113);                            // src(1, 3) channel 1
  EXPECT_FLOAT_EQ(at(1, 3, 0), 0);                              // padding column

  // Crop then flip: the cropped image mirrored.
  transform_u8(src.data(), g, table, CropFlip{.pad = 1, .dy = 0, .dx = 2, .flip = true},
               dst.data());
  EXPECT_FLOAT_EQ(at(1, 0, 0), 0);  // mirrored padding column
  EXPECT_FLOAT_EQ(at(1, 3, 0), 1);
  EXPECT_FLOAT_EQ(at(2, 1, 1), 113);

  EXPECT_THROW(transform_u8(src.data(), g, table, CropFlip{.pad = 1, .dy = 3}, dst.data()), Error);
}

TEST(Transforms, PaddingIsNormalisedBlack) {
  const std::vector<uint8_t> src(4, 255);
  std::vector<float> dst(4);
  transform_u8(src.data(), {2, 2, 1}, PixelTable(Normalize{}), CropFlip{.pad = 2, .dy = 0, .dx = 0},
               dst.data());
  for (float v : dst) EXPECT_EQ(v, norm(0));  // the window lies wholly in the padding
}

TEST(Transforms, FloatVersionPadsWithZero) {
  const std::vector<float> src = {1, 2, 3, 4};  // 2x2x1
  std::vector<float> dst(4);
  transform_f32(src.data(), {2, 2, 1}, CropFlip{.pad = 1, .dy = 1, .dx = 2, .flip = true},
                dst.data());
  // Crop = [[2, 0], [4, 0]] then flip -> [[0, 2], [0, 4]].
  EXPECT_EQ(dst, (std::vector<float>{0, 2, 0, 4}));
}

TEST(Transforms, DrawCropFlipCoversAllChoicesDeterministically) {
  const AugmentOptions opts{.flip = true, .crop_pad = 2};
  std::set<std::tuple<int64_t, int64_t, bool>> seen;
  Rng rng(3);
  for (int i = 0; i < 2000; ++i) {
    const CropFlip cf = draw_crop_flip(opts, rng);
    ASSERT_EQ(cf.pad, 2);
    seen.insert({cf.dy, cf.dx, cf.flip});
  }
  EXPECT_EQ(seen.size(), 5u * 5u * 2u);
  Rng a(9), b(9);
  for (int i = 0; i < 10; ++i) {
    const CropFlip x = draw_crop_flip(opts, a), y = draw_crop_flip(opts, b);
    EXPECT_EQ(std::tie(x.dy, x.dx, x.flip), std::tie(y.dy, y.dx, y.flip));
  }
  Rng c(1);
  const CropFlip none = draw_crop_flip({}, c);
  EXPECT_EQ(c.offset(), 0u);  // no augmentation draws nothing
  EXPECT_EQ(std::tie(none.pad, none.dy, none.dx, none.flip), std::tuple(0, 0, 0, false));
}

TEST(Transforms, RandomErasingRate) {
  // torchvision's RandomErasing(p, scale=(0.02, 0.33), ratio=(0.3, 3.3)): about p of the
  // images get a box, every box fits and covers 2-33 % of the image (up to rounding).
  const ImageGeometry g{28, 28, 1};
  Rng rng(5);
  int erased = 0;
  double area = 0;
  for (int i = 0; i < 4000; ++i) {
    const EraseBox box = draw_erase({.erase = 0.5f}, g, rng);
    if (box.h == 0) continue;
    ++erased;
    ASSERT_GE(box.y, 0);
    ASSERT_GE(box.x, 0);
    ASSERT_LE(box.y + box.h, g.h);
    ASSERT_LE(box.x + box.w, g.w);
    const double fraction = static_cast<double>(box.h * box.w) / (28.0 * 28.0);
    ASSERT_GE(fraction, 0.01);
    ASSERT_LE(fraction, 0.40);
    area += fraction;
  }
  EXPECT_NEAR(erased / 4000.0, 0.5, 0.03);
  EXPECT_NEAR(area / erased, (0.02 + 0.33) / 2, 0.03);
  Rng none(1);
  EXPECT_EQ(draw_erase({}, g, none).h, 0);
  EXPECT_EQ(none.offset(), 0u);  // no erasing draws nothing
  EXPECT_THROW(draw_erase({.erase = 1.5f}, g, none), Error);
}

TEST(Transforms, EraseZeroesTheBoxInEveryChannel) {
  const ImageGeometry g{3, 4, 2};
  std::vector<float> image(24, 1.0f);
  erase({.y = 1, .x = 1, .h = 2, .w = 2}, g, image.data());
  for (int64_t y = 0; y < 3; ++y)
    for (int64_t x = 0; x < 4; ++x)
      for (int64_t c = 0; c < 2; ++c) {
        const bool inside = y >= 1 && x >= 1 && x <= 2;
        EXPECT_EQ(image[(y * 4 + x) * 2 + c], inside ? 0.0f : 1.0f) << y << "," << x << "," << c;
      }
  EXPECT_THROW(erase({.y = 2, .x = 0, .h = 2, .w = 1}, g, image.data()), Error);
}

}  // namespace
}  // namespace braid::data
