// Fashion-MNIST (Xiao et al., 2017): 28x28 grey images of 10 clothing classes, 60000 train
// and 10000 test, in IDX files as Debian's dataset-fashion-mnist package installs them.
#pragma once

#include <string>

#include "data/dataset.h"

namespace braid::data {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;

// Reads <dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz (or the same names without
// .gz). Returns [N, 28, 28, 1] u8 images and labels in [0, 10). Missing or inconsistent
// files (count mismatch, a label >= 10, wrong image size) are IoErrors saying what to do.
ImageDataset load_fashion_mnist(const std::string& dir = kFashionMnistDir,
                                Split split = Split::train);

// Builds an ImageDataset from an IDX image file [N, H, W] and an IDX label file [N].
ImageDataset load_idx_images(const std::string& images_path, const std::string& labels_path,
                             int32_t num_classes, const std::string& hint = "");

}  // namespace braid::data
