// Images from .npy files: the same pictures saved as PyTorch does ([N, C, H, W]) and
// channels-last ([N, H, W, C]) train to the same bits under the matching npy_layout, and a
// layout that cannot match the model's [H, W, C] input is an error naming both shapes.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "temp_dir.h"
#include "train/trainer.h"

namespace braid::train {
namespace {

using braid::testing::TempDir;
using nlohmann::json;

constexpr int64_t kN = 48, kC = 3, kH = 6, kW = 5;  // every dimension its own size

// A format 1.0 .npy file, as numpy.save writes it.
void write_npy(const std::string& path, const std::string& descr, const std::string& shape,
               const void* data, size_t bytes) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const char len[2] = {static_cast<char>(dict.size() & 0xFF), static_cast<char>(dict.size() >> 8)};
  out.write(len, 2);
  out << dict;
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

// The same images twice: [N, C, H, W] in dir/nchw_*, [N, H, W, C] in dir/nhwc_*.
void write_images(const std::string& dir) {
  std::vector<float> nchw(kN * kC * kH * kW), nhwc(nchw.size());
  std::vector<int64_t> labels(kN);
  uint32_t state = 12345;
  for (int64_t n = 0; n < kN; ++n) {
    labels[static_cast<size_t>(n)] = n % 4;
    for (int64_t c = 0; c < kC; ++c)
      for (int64_t h = 0; h < kH; ++h)
        for (int64_t w = 0; w < kW; ++w) {
          state = state * 1664525u + 1013904223u;
          // The class shows in channel c's brightness, so the model has something to learn.
          const float v = static_cast<float>(state >> 8) / 16777216.0f +
                          (c == n % kC ? 0.5f * static_cast<float>(n % 4) : 0.0f);
          nchw[static_cast<size_t>(((n * kC + c) * kH + h) * kW + w)] = v;
          nhwc[static_cast<size_t>(((n * kH + h) * kW + w) * kC + c)] = v;
        }
  }
  const std::string chw = "(" + std::to_string(kN) + ", 3, 6, 5)";
  const std::string hwc = "(" + std::to_string(kN) + ", 6, 5, 3)";
  const std::string n = "(" + std::to_string(kN) + ",)";
  write_npy(dir + "/nchw_x.npy", "<f4", chw, nchw.data(), nchw.size() * sizeof(float));
  write_npy(dir + "/nhwc_x.npy", "<f4", hwc, nhwc.data(), nhwc.size() * sizeof(float));
  write_npy(dir + "/y.npy", "<i8", n, labels.data(), labels.size() * sizeof(int64_t));
}

TrainConfig npy_config(const std::string& dir, const std::string& layout) {
  TrainConfig c;
  c.model = json::parse(R"({"input": [6, 5, 3], "layers": [
      {"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1}, {"type": "relu"},
      {"type": "maxpool2d", "kernel": 2}, {"type": "flatten"},
      {"type": "linear", "out_features": 4}]})");
  c.dataset = "npy";
  const std::string x = dir + "/" + layout + "_x.npy", y = dir + "/y.npy";
  c.npy = {x, y, x, y};
  c.npy_layout = layout;
  c.batch = 8;
  c.max_steps = 8;
  c.augment_flip = true;  // flips along W: only right if W is where braid expects it
  c.augment_crop_pad = 1;
  c.optimizer.name = "sgd";
  c.optimizer.lr = 0.1;
  c.optimizer.momentum = 0.9;
  c.seed = 3;
  c.out = dir + "/run_" + layout;
  return c;
}

TEST(NpyLayout, NchwAndNhwcFilesOfTheSameImagesTrainToTheSameBits) {
  const TempDir tmp;
  write_images(tmp.path());
  Trainer from_nchw(npy_config(tmp.path(), "nchw"));
  from_nchw.run();
  Trainer from_nhwc(npy_config(tmp.path(), "nhwc"));
  from_nhwc.run();
  const nn::ParamSet& a = from_nchw.params();
  const nn::ParamSet& b = from_nhwc.params();
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.params(), b.params(), a.size() * sizeof(float)), 0);
  // And training did something: the parameters left their initial values.
  Trainer untrained(npy_config(tmp.path(), "nchw"));
  EXPECT_NE(std::memcmp(a.params(), untrained.params().params(), a.size() * sizeof(float)), 0);
}

// PyTorch's files under the default layout need no setting; channels-last files read as
// NCHW (or the reverse) give a shape the model's [6, 5, 3] cannot take, and the error says
// both shapes and the layout it read them in.
TEST(NpyLayout, TheWrongLayoutIsAnErrorNamingBothShapes) {
  const TempDir tmp;
  write_images(tmp.path());
  TrainConfig c = npy_config(tmp.path(), "nchw");
  EXPECT_EQ(TrainConfig().npy_layout, "nchw");  // PyTorch's order is the default
  c.npy_layout = "nhwc";                        // nchw files read as channels-last
  try {
    Trainer t(c);
    FAIL() << "NCHW files read as nhwc trained";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("data gives samples of shape [3, 6, 5]"), std::string::npos) << m;
    EXPECT_NE(m.find("the model takes [6, 5, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("npy_layout 'nhwc'"), std::string::npos) << m;
  }
  c = npy_config(tmp.path(), "nhwc");
  c.npy_layout = "nchw";  // channels-last files read as PyTorch's order
  try {
    Trainer t(c);
    FAIL() << "NHWC files read as nchw trained";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("data gives samples of shape [5, 3, 6]"), std::string::npos) << m;
    EXPECT_NE(m.find("the model takes [6, 5, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("as 'nhwc' they would be [6, 5, 3]"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace braid::train
