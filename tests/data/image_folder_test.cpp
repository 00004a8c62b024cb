// Image folders on real files: Fashion-MNIST images written as PNG (lossless: decoded back to
// the same bytes) and JPEG (lossy: close), a class per subfolder; bilinear resizing against
// torch's interpolate worked by hand; and every damaged input refused naming its file.
#include "data/image_folder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/fashion_mnist.h"
#include "data/image_codec.h"
#include "fashion_mnist_data.h"
#include "temp_dir.h"

namespace braid::data {
namespace {

using braid::testing::TempDir;
namespace fs = std::filesystem;

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Test images 0..k-1 of Fashion-MNIST under root/<class name>/, as PNG.
struct Folder {
  ImageDataset data = load_fashion_mnist(kFashionMnistDir, Split::test);
  void write(const std::string& root, int per_class) {
    int written[10] = {};
    for (int64_t i = 0; i < data.n; ++i) {
      const int32_t y = data.label_data()[i];
      if (y > 2 || written[y] == per_class) continue;
      const fs::path dir = fs::path(root) / ("class-" + std::to_string(y));
      fs::create_directories(dir);
      write_png((dir / (std::to_string(i) + ".png")).string(), data.image(i), 28, 28, 1);
      ++written[y];
    }
  }
};

TEST(ImageFolder, PngImagesDecodeToTheirPixelsAndClassesAreTheSortedFolders) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  Folder folder;
  folder.write(tmp.file("train"), 4);
  fs::create_directories(tmp.file("train/class-1/notes"));  // a folder inside: not a class
  std::ofstream(tmp.file("train/class-1/README.txt")) << "not an image";
  const ImageFolderIndex index = scan_image_folder(tmp.file("train"));
  EXPECT_EQ(index.classes, (std::vector<std::string>{"class-0", "class-1", "class-2"}));
  ASSERT_EQ(index.files.size(), 12u);
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(index.labels[i], static_cast<int32_t>(i / 4));

  ImageFolderOptions o;
  o.height = o.width = 28;
  o.channels = 1;
  o.mean = {0.0f};
  o.std = {1.0f};
  const ImageFolderSource source(index, o);
  Tensor x = Tensor::empty(Shape{12, 28, 28, 1});
  Tensor y = Tensor::empty(Shape{12}, DType::i32);
  std::vector<SampleRef> refs;
  for (int64_t i = 0; i < 12; ++i) refs.push_back({i, i});
  source.fill(refs, FillContext{}, x, y);
  for (int64_t r = 0; r < 12; ++r) {
    const int64_t original = std::stoll(fs::path(index.files[static_cast<size_t>(r)]).stem());
    EXPECT_EQ(y.data<int32_t>()[r], folder.data.label_data()[original]);
    for (int64_t p = 0; p < 28 * 28; ++p)
      ASSERT_NEAR(x.f32()[r * 784 + p], folder.data.image(original)[p] / 255.0f, 1e-6f)
          << "image " << r << " pixel " << p;
  }
  // Normalised as (x / 255 - mean) / std, per channel: gray read as 3 equal channels.
  ImageFolderOptions rgb = o;
  rgb.channels = 3;
  rgb.mean = {0.5f, 0.25f, 0.0f};
  rgb.std = {0.25f, 0.5f, 2.0f};
  const ImageFolderSource colour(index, rgb);
  Tensor x3 = Tensor::empty(Shape{1, 28, 28, 3});
  colour.fill({refs.data(), 1}, FillContext{}, x3, y);
  const int64_t first = std::stoll(fs::path(index.files[0]).stem());
  for (int64_t p = 0; p < 28 * 28; ++p)
    for (int k = 0; k < 3; ++k)
      ASSERT_NEAR(x3.f32()[p * 3 + k],
                  (folder.data.image(first)[p] / 255.0f - rgb.mean[k]) / rgb.std[k], 1e-5f)
          << "pixel " << p << " channel " << k;
  // A test folder is read with the training folder's class numbers.
  folder.write(tmp.file("test"), 1);
  fs::remove_all(tmp.file("test/class-0"));
  const ImageFolderIndex test = scan_image_folder(tmp.file("test"), index.classes);
  EXPECT_EQ(test.labels, (std::vector<int32_t>{1, 2}));
  fs::create_directories(tmp.file("test/class-9"));
  std::ofstream(tmp.file("test/class-9/a.png")) << "x";
  EXPECT_THROW(scan_image_folder(tmp.file("test"), index.classes), Error);
}

TEST(ImageFolder, JpegDecodesCloseToItsSourceInGrayAndRgb) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  Folder folder;
  // A 224 x 224 RGB picture: an image upscaled by 8, the channels offset.
  std::vector<uint8_t> rgb(224 * 224 * 3);
  for (int y = 0; y < 224; ++y)
    for (int x = 0; x < 224; ++x)
      for (int k = 0; k < 3; ++k)
        rgb[(y * 224 + x) * 3 + k] =
            static_cast<uint8_t>(folder.data.image(0)[(y / 8) * 28 + x / 8] / 2 + 40 * k);
  write_jpeg(tmp.file("a.jpg"), rgb.data(), 224, 224, 3, 95);
  const DecodedImage image = decode_image(tmp.file("a.jpg"), 3);
  ASSERT_EQ(image.h, 224);
  ASSERT_EQ(image.w, 224);
  ASSERT_EQ(image.c, 3);
  double diff = 0;
  for (size_t i = 0; i < rgb.size(); ++i) diff += std::abs(image.pixels[i] - rgb[i]);
  EXPECT_LT(diff / static_cast<double>(rgb.size()), 3.0) << "mean absolute error at quality 95";
  const DecodedImage gray = decode_image(tmp.file("a.jpg"), 1);
  EXPECT_EQ(gray.c, 1);
  EXPECT_EQ(gray.pixels.size(), 224u * 224u);
}

// torch.nn.functional.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
// of [[0, 100], [200, 40]]: sources at -0.25 (clamped to 0), 0.25, 0.75, 1.25 (clamped to 1).
TEST(ImageFolder, BilinearResizeIsTorchsWithoutAntialiasing) {
  const DecodedImage two{2, 2, 1, {0, 100, 200, 40}};
  std::vector<float> out(16);
  resize_bilinear(two, 4, 4, out.data());
  const std::vector<float> row0 = {0, 25, 75, 100}, row3 = {200, 160, 80, 40};
  for (int x = 0; x < 4; ++x) {
    EXPECT_FLOAT_EQ(out[x], row0[static_cast<size_t>(x)]);
    EXPECT_FLOAT_EQ(out[12 + x], row3[static_cast<size_t>(x)]);
  }
  // Row 1 samples 0.75 of row 0 and 0.25 of row 3's sources.
  EXPECT_FLOAT_EQ(out[4], 0.75f * 0 + 0.25f * 200);
  EXPECT_FLOAT_EQ(out[7], 0.75f * 100 + 0.25f * 40);
}

TEST(ImageFolder, DamagedFilesAndFoldersAreRefusedNamingThem) {
  const TempDir tmp;
  std::vector<uint8_t> pixels(32 * 32 * 3);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 7);
  write_png(tmp.file("good.png"), pixels.data(), 32, 32, 3);
  write_jpeg(tmp.file("good.jpg"), pixels.data(), 32, 32, 3, 90);
  auto expect_refused = [](const std::string& path, const std::string& part) {
    try {
      decode_image(path, 3);
      ADD_FAILURE() << path << " was decoded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  for (const char* name : {"good.png", "good.jpg"}) {
    const std::vector<uint8_t> bytes = file_bytes(tmp.file(name));
    const std::string cut = tmp.file(std::string("cut-") + name);
    std::ofstream(cut, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size() / 2));
    expect_refused(cut, std::string(name).ends_with(".png") ? "damaged PNG" : "damaged JPEG");
  }
  std::ofstream(tmp.file("text.png")) << "hello";
  expect_refused(tmp.file("text.png"), "neither PNG nor JPEG");
  expect_refused(tmp.file("missing.png"), "cannot open");

  fs::create_directories(tmp.file("root/empty"));
  EXPECT_THROW(scan_image_folder(tmp.file("root")), Error) << "a class without images";
  EXPECT_THROW(scan_image_folder(tmp.file("nowhere")), Error);
  EXPECT_THROW(scan_image_folder(tmp.file("good.png")), Error) << "not a folder";
}

}  // namespace
}  // namespace braid::data
