// Tests that train or evaluate on the real Fashion-MNIST files skip, naming the package,
// where Debian's dataset-fashion-mnist is not installed.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>

namespace braid::testing {

inline bool have_fashion_mnist() {
  const std::filesystem::path dir = "/usr/share/datasets/fashion-mnist";
  return std::filesystem::exists(dir / "train-images-idx3-ubyte.gz") &&
         std::filesystem::exists(dir / "t10k-images-idx3-ubyte.gz");
}

}  // namespace braid::testing

#define REQUIRE_FASHION_MNIST()                             \
  if (!braid::testing::have_fashion_mnist())                \
  GTEST_SKIP() << "Fashion-MNIST missing: apt-get install " \
                  "dataset-fashion-mnist (scripts/setup.sh does)"
