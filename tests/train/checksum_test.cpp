#include "core/checksum.h"

#include <gtest/gtest.h>

#include <string>

namespace braid {
namespace {

TEST(Checksum, MatchesXxh64ReferenceVectors) {
  EXPECT_EQ(xxh64("", 0), 0xef46db3751d8e999ull);
  EXPECT_EQ(xxh64("a", 1), 0xd24ec4f1a98c6e5bull);
  EXPECT_EQ(xxh64("abc", 3), 0x44bc2cf5ad770999ull);
  EXPECT_NE(xxh64("abc", 3, 1), xxh64("abc", 3));
}

TEST(Checksum, StreamEqualsOneShotOverAnySplit) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data += static_cast<char>(i * 37);
  for (size_t split : {size_t{0}, size_t{1}, size_t{31}, size_t{32}, size_t{999}, size_t{1000}}) {
    Xxh64Stream s(7);
    s.update(data.data(), split);
    s.update(data.data() + split, data.size() - split);
    EXPECT_EQ(s.digest(), xxh64(data.data(), data.size(), 7)) << split;
  }
}

TEST(Checksum, HexRoundTrips) {
  EXPECT_EQ(hex64(0x0123456789abcdefull), "0123456789abcdef");
  EXPECT_EQ(parse_hex64("0123456789ABCDEF"), 0x0123456789abcdefull);
  EXPECT_EQ(parse_hex64(hex64(~0ull)), ~0ull);
  EXPECT_FALSE(parse_hex64("123"));
  EXPECT_FALSE(parse_hex64("0123456789abcdeg"));
}

}  // namespace
}  // namespace braid
