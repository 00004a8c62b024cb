// copy_streaming (core/memory.h) against memcpy: every length around the 16-byte store
// width and the 64-byte loop, at every destination and source misalignment, leaving the
// bytes around the destination untouched.
#include "core/memory.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace braid {
namespace {

TEST(CopyStreaming, EqualsMemcpyForEveryLengthAndAlignment) {
  std::vector<uint8_t> src(512 + 64), got(512 + 128), want(512 + 128);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  for (size_t dst_off = 0; dst_off < 17; ++dst_off)
    for (size_t src_off = 0; src_off < 5; ++src_off)
      for (size_t len : {0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 200, 511}) {
        std::fill(got.begin(), got.end(), 0xee);
        std::fill(want.begin(), want.end(), 0xee);
        copy_streaming(got.data() + 32 + dst_off, src.data() + src_off, len);
        std::memcpy(want.data() + 32 + dst_off, src.data() + src_off, len);
        ASSERT_EQ(got, want) << "dst+" << dst_off << " src+" << src_off << " len " << len;
      }
}

TEST(CopyStreaming, CopiesLargeBuffers) {
  std::vector<float> src(1 << 20), dst(1 << 20, -1.0f);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  copy_streaming(dst.data(), src.data(), src.size() * sizeof(float));
  EXPECT_EQ(dst, src);
}

}  // namespace
}  // namespace braid
