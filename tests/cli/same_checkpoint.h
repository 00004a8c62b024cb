// Whether two runs' checkpoints hold the same bits (weights and optimizer state): the
// reference for "resumed equals uninterrupted" and "replayed equals recorded".
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

namespace braid::testing {

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline ::testing::AssertionResult same_checkpoint(const std::string& a, const std::string& b) {
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    const std::string x = read_bytes(a + "/" + file), y = read_bytes(b + "/" + file);
    if (x.empty() || x != y)
      return ::testing::AssertionFailure() << file << " differs between " << a << " and " << b;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace braid::testing
