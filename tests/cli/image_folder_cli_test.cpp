// `braid train` on an image folder as a user has one: Fashion-MNIST images written as PNG
// files, a subfolder per class, trained on two ranks to well above chance; a folder whose
// image is damaged fails the run naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "data/fashion_mnist.h"
#include "data/image_codec.h"
#include "fashion_mnist_data.h"
#include "run_braid.h"
#include "temp_dir.h"

namespace {

using braid::testing::run_braid;
using braid::testing::TempDir;
namespace fs = std::filesystem;

// `per_class` images of classes 0, 1 and 8 (t-shirt, trouser, bag) of a split, as PNGs under
// root/<name>/.
void write_folder(const std::string& root, braid::data::Split split, int per_class) {
  const braid::data::ImageDataset d =
      braid::data::load_fashion_mnist(braid::data::kFashionMnistDir, split);
  const std::pair<int, const char*> classes[] = {{0, "t-shirt"}, {1, "trouser"}, {8, "bag"}};
  for (const auto& [label, name] : classes) {
    fs::create_directories(fs::path(root) / name);
    int written = 0;
    for (int64_t i = 0; i < d.n && written < per_class; ++i)
      if (d.label_data()[i] == label)
        braid::data::write_png(
            (fs::path(root) / name / (std::to_string(written++) + ".png")).string(), d.image(i), 28,
            28, 1);
  }
}

TEST(ImageFolderCli, TwoRanksTrainOnAFolderOfPngsWellAboveChance) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  write_folder(tmp.file("train"), braid::data::Split::train, 200);
  write_folder(tmp.file("test"), braid::data::Split::test, 50);
  const std::string flags = "train --model mlp --dataset image_folder --image-train " +
                            tmp.file("train") + " --image-test " + tmp.file("test") +
                            " --image-channels 1 --image-mean 0.286 --image-std 0.353 "
                            "--epochs 3 --batch 32 --threads 1 --out " +
                            tmp.file("run");
  const auto r = run_braid("launch -n 2 -- " + std::string(BRAID_BINARY) + " " + flags);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("600 images of 3 classes (bag, t-shirt, trouser)"), std::string::npos)
      << r.output;
  // The last evaluation's accuracy on the 150 test images (chance: 1/3).
  std::ifstream metrics(tmp.file("run/metrics.jsonl"));
  double accuracy = 0;
  for (std::string line; std::getline(metrics, line);)
    if (line.find("\"eval\"") != std::string::npos) {
      const size_t at = line.find("\"accuracy\":");
      accuracy = std::stod(line.substr(at + 11));
    }
  EXPECT_GT(accuracy, 0.9) << r.output;

  // A damaged image stops the run, naming it.
  std::ofstream(tmp.file("train/bag/0.png"), std::ios::trunc) << "\x89PNG broken";
  const auto bad = run_braid(flags + "-bad");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.output.find(tmp.file("train/bag/0.png") + "': "), std::string::npos) << bad.output;
}

}  // namespace
