// The PNG writer, read back with cairo: the signature and size asked for, each curve's
// colour inside its panel's plotting area, and nothing but background in the padding
// around the figure.
#include "report/png_writer.h"

#include <cairo.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "core/error.h"
#include "report/figure.h"
#include "temp_dir.h"

namespace braid::report {
namespace {

RunCurves four_panels() {
  RunCurves c;
  for (int s = 1; s <= 400; ++s) {
    c.train_loss.add(s * 10, 2.0 / (1 + s * 0.05));
    c.lr.add(s * 10, 0.003 * (1 - s / 500.0));
    c.samples_per_s.add(s * 10, 7000 + (s % 7) * 50);
  }
  for (int s = 1; s <= 8; ++s) {
    c.eval_loss.add(s * 500, 1.0 / s);
    c.eval_accuracy.add(s * 500, 0.6 + s * 0.03);
  }
  return c;
}

struct Image {
  std::unique_ptr<cairo_surface_t, void (*)(cairo_surface_t*)> surface{nullptr,
                                                                       cairo_surface_destroy};
  int width = 0, height = 0;

  explicit Image(const std::string& path) {
    surface.reset(cairo_image_surface_create_from_png(path.c_str()));
    EXPECT_EQ(cairo_surface_status(surface.get()), CAIRO_STATUS_SUCCESS);
    width = cairo_image_surface_get_width(surface.get());
    height = cairo_image_surface_get_height(surface.get());
  }
  Color at(int x, int y) const {
    const unsigned char* row =
        cairo_image_surface_get_data(surface.get()) +
        static_cast<size_t>(y) * cairo_image_surface_get_stride(surface.get());
    uint32_t px;
    std::memcpy(&px, row + 4 * x, 4);  // native-endian 0xAARRGGBB
    return {static_cast<uint8_t>(px >> 16), static_cast<uint8_t>(px >> 8),
            static_cast<uint8_t>(px)};
  }
};

bool near(Color a, Color b, int tolerance) {
  return std::abs(a.r - b.r) <= tolerance && std::abs(a.g - b.g) <= tolerance &&
         std::abs(a.b - b.b) <= tolerance;
}

TEST(PngWriter, DrawsEachCurveInItsPanelAndNothingInThePadding) {
  braid::testing::TempDir tmp;
  const Figure f = layout_figure(four_panels(), {.width = 900, .height = 640, .title = "png"});
  ASSERT_EQ(f.panels.size(), 4u);
  write_png(f, tmp.file("c.png"));

  std::ifstream in(tmp.file("c.png"), std::ios::binary);
  std::string head(8, '\0');
  in.read(head.data(), 8);
  EXPECT_EQ(head, "\x89PNG\r\n\x1a\n");

  const Image image(tmp.file("c.png"));
  ASSERT_EQ(image.width, 900);
  ASSERT_EQ(image.height, 640);
  for (const Panel& panel : f.panels) {
    const Rect& a = panel.map.area;
    for (const Curve& curve : panel.curves) {
      int hits = 0;
      for (int y = static_cast<int>(a.y) + 2; y < static_cast<int>(a.y + a.h) - 1; ++y)
        for (int x = static_cast<int>(a.x) + 2; x < static_cast<int>(a.x + a.w) - 1; ++x)
          hits += near(image.at(x, y), curve.color, 40);
      EXPECT_GT(hits, 50) << panel.title << ": " << curve.name;
    }
  }
  const int pad = static_cast<int>(kPadding);
  for (int y = 0; y < image.height; ++y)
    for (int x = 0; x < image.width; ++x) {
      const bool padding = x < pad || y < pad || x >= image.width - pad || y >= image.height - pad;
      if (padding) {
        ASSERT_TRUE(image.at(x, y) == f.background) << x << "," << y;
      }
    }
}

TEST(PngWriter, AnUnwritablePathIsAnIoErrorNamingIt) {
  braid::testing::TempDir tmp;
  const Figure f = layout_figure(four_panels(), {});
  try {
    write_png(f, tmp.file("missing/c.png"));
    ADD_FAILURE() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(tmp.file("missing/c.png")), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace braid::report
