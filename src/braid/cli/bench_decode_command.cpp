// `braid bench decode`: images decoded a second on one core, through what an image folder's
// loader runs per sample (data/image_folder.h: decode, resize, normalise): Fashion-MNIST
// test images as 28 x 28 gray PNGs, and as 224 x 224 RGB JPEGs (each upscaled, quality 90,
// as photographs of that size come). The files are written first, to a temporary folder.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/median.h"
#include "core/timer.h"
#include "data/fashion_mnist.h"
#include "data/image_codec.h"
#include "data/image_folder.h"

namespace braid::cli {
namespace {

namespace fs = std::filesystem;

struct DecodeBenchFlags {
  int images = 500;
  int rounds = 3;
};

// Images a second over `rounds` passes of every file (the median pass), one thread.
double decode_rate(const data::ImageFolderSource& source, int rounds) {
  const int64_t n = source.size();
  const Shape in = source.input_shape();
  Tensor x = Tensor::empty(Shape{1, in[0], in[1], in[2]});
  Tensor y = Tensor::empty(Shape{1}, DType::i32);
  std::vector<double> rates;
  for (int r = 0; r < rounds; ++r) {
    const Stopwatch watch;
    for (int64_t i = 0; i < n; ++i) {
      const data::SampleRef ref{i, i};
      source.fill({&ref, 1}, data::FillContext{}, x, y);
    }
    rates.push_back(static_cast<double>(n) / watch.elapsed());
  }
  return median(rates);
}

void run_decode_bench(const DecodeBenchFlags& f) {
  const data::ImageDataset mnist =
      data::load_fashion_mnist(data::kFashionMnistDir, data::Split::test);
  const fs::path dir =
      fs::temp_directory_path() / ("braid-bench-decode-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "png" / "all");
  fs::create_directories(dir / "jpeg" / "all");
  const int n = std::min<int>(f.images, static_cast<int>(mnist.n));
  std::vector<uint8_t> rgb(224 * 224 * 3);
  for (int i = 0; i < n; ++i) {
    const std::string name = std::to_string(i);
    data::write_png((dir / "png" / "all" / (name + ".png")).string(), mnist.image(i), 28, 28, 1);
    for (int py = 0; py < 224; ++py)
      for (int px = 0; px < 224; ++px)
        for (int k = 0; k < 3; ++k)
          rgb[static_cast<size_t>((py * 224 + px) * 3 + k)] =
              static_cast<uint8_t>(mnist.image(i)[(py / 8) * 28 + px / 8] * (3 - k) / 3);
    data::write_jpeg((dir / "jpeg" / "all" / (name + ".jpg")).string(), rgb.data(), 224, 224, 3,
                     90);
  }
  data::ImageFolderOptions png;
  png.height = png.width = 28;
  png.channels = 1;
  data::ImageFolderOptions jpeg;
  jpeg.height = jpeg.width = 224;
  jpeg.channels = 3;
  const data::ImageFolderSource png_source(data::scan_image_folder((dir / "png").string()), png);
  const data::ImageFolderSource jpeg_source(data::scan_image_folder((dir / "jpeg").string()), jpeg);
  std::printf(
      "images decoded, resized and normalised a second on one core (median of %d "
      "passes over %d files):\n",
      f.rounds, n);
  std::printf("  PNG 28x28 gray:    %.0f images/s\n", decode_rate(png_source, f.rounds));
  std::printf("  JPEG 224x224 RGB:  %.0f images/s\n", decode_rate(jpeg_source, f.rounds));
  fs::remove_all(dir);
}

}  // namespace

void add_decode_bench(CLI::App& bench) {
  auto f = std::make_shared<DecodeBenchFlags>();
  CLI::App* cmd = bench.add_subcommand(
      "decode", "Image-folder decoding: PNG 28x28 and JPEG 224x224 images a second on one core");
  cmd->add_option("--images", f->images, "files of each kind")->check(CLI::Range(10, 10000));
  cmd->add_option("--rounds", f->rounds, "passes over them (the median is printed)")
      ->check(CLI::Range(1, 100));
  cmd->callback([f] { run_decode_bench(*f); });
}

}  // namespace braid::cli
