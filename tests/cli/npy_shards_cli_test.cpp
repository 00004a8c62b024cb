// `braid train` over 2 ranks on Fashion-MNIST written as 4 .npy shard pairs (dataset npy,
// npy_shards): each rank maps and reads only its 2 files, and the run trains to a sensible
// accuracy on the test pair, mapped and sharded by sample.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "data/fashion_mnist.h"
#include "data/npy_files.h"
#include "fashion_mnist_data.h"
#include "run_braid.h"
#include "temp_dir.h"

namespace {

using braid::testing::run_braid;
using braid::testing::TempDir;
using nlohmann::json;
namespace tu = braid::data::testing_util;

double last_accuracy(const std::string& out) {
  std::ifstream in(out + "/metrics.jsonl");
  double acc = -1;
  for (std::string line; std::getline(in, line);) {
    const json rec = json::parse(line, nullptr, false);
    if (rec.is_object() && rec.contains("accuracy")) acc = rec["accuracy"].get<double>();
  }
  return acc;
}

// Images [first, first + n) of `d` as f4 [n, 1, 28, 28] in [0, 1] (PyTorch's NCHW, as
// torchvision's ToTensor gives them) and their labels as i8.
void write_pair(const braid::data::ImageDataset& d, int64_t first, int64_t n, const std::string& x,
                const std::string& y) {
  std::vector<float> pixels(d.image(first), d.image(first) + n * d.image_bytes());
  for (float& p : pixels) p /= 255.0f;
  std::vector<int64_t> labels(d.label_data() + first, d.label_data() + first + n);
  // Appended, not "(" + std::string: GCC 12's -Wrestrict misfires on that.
  std::string count = "(";
  count += std::to_string(n);
  std::ofstream(x, std::ios::binary)
      << tu::npy_file_bytes("<f4", count + ", 1, 28, 28)", tu::raw_bytes(pixels));
  std::ofstream(y, std::ios::binary)
      << tu::npy_file_bytes("<i8", count + ",)", tu::raw_bytes(labels));
}

TEST(NpyShardsCli, TwoRanksTrainOnFourShardsToASensibleAccuracy) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const auto train =
      braid::data::load_fashion_mnist(braid::data::kFashionMnistDir, braid::data::Split::train);
  const auto test =
      braid::data::load_fashion_mnist(braid::data::kFashionMnistDir, braid::data::Split::test);
  for (int s = 0; s < 4; ++s)
    write_pair(train, s * 5000, 5000, tmp.file("part-" + std::to_string(s) + ".x.npy"),
               tmp.file("part-" + std::to_string(s) + ".y.npy"));
  write_pair(test, 0, 2000, tmp.file("test_x.npy"), tmp.file("test_y.npy"));
  std::ofstream(tmp.file("config.json")) << json{{"model", "mlp"},
                                                 {"dataset", "npy"},
                                                 {"npy", {"test_x.npy", "test_y.npy"}},
                                                 {"npy_shards", {"part-*.x.npy"}},
                                                 {"npy_shard_labels", {"part-*.y.npy"}},
                                                 {"batch", 50},
                                                 {"epochs", 2},
                                                 {"threads", 1},
                                                 {"out", tmp.file("out")}};
  const auto r = run_braid("launch -n 2 -- " + std::string(BRAID_BINARY) + " train --config " +
                           tmp.file("config.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  // 4 files over 2 ranks, 10,000 samples each: 200 steps of 50 an epoch.
  EXPECT_NE(r.output.find("npy shards: 4 files over 2 ranks; each rank takes 10000 samples"),
            std::string::npos)
      << r.output;
  // Two epochs of the default mlp recipe on a third of Fashion-MNIST (0.76 after one).
  const double accuracy = last_accuracy(tmp.file("out"));
  std::printf("test accuracy after two epochs on 4 shards: %.4f\n", accuracy);
  EXPECT_GE(accuracy, 0.75) << r.output;
}

// Fewer files than ranks: refused before training, saying what to do.
TEST(NpyShardsCli, FewerFilesThanRanksIsRefused) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const auto test =
      braid::data::load_fashion_mnist(braid::data::kFashionMnistDir, braid::data::Split::test);
  write_pair(test, 0, 500, tmp.file("part-0.x.npy"), tmp.file("part-0.y.npy"));
  write_pair(test, 500, 500, tmp.file("test_x.npy"), tmp.file("test_y.npy"));
  std::ofstream(tmp.file("config.json")) << json{{"model", "mlp"},
                                                 {"dataset", "npy"},
                                                 {"npy", {"test_x.npy", "test_y.npy"}},
                                                 {"npy_shards", {"part-*.x.npy"}},
                                                 {"npy_shard_labels", {"part-*.y.npy"}},
                                                 {"max_steps", 2},
                                                 {"threads", 1},
                                                 {"out", tmp.file("out")}};
  const auto r = run_braid("launch -n 2 -- " + std::string(BRAID_BINARY) + " train --config " +
                           tmp.file("config.json"));
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("at least 2 files"), std::string::npos) << r.output;
}

}  // namespace
