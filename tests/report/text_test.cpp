// Texts a figure holds are valid UTF-8 without control characters, whatever came in.
#include "report/text.h"

#include <gtest/gtest.h>

namespace braid::report {
namespace {

TEST(Text, KeepsValidTextAndReplacesWhatIsNot) {
  EXPECT_EQ(clean_text("loss \xC3\xA9t\xC3\xA9 \xE2\x9C\x93 \xF0\x9F\x98\x80"),
            "loss \xC3\xA9t\xC3\xA9 \xE2\x9C\x93 \xF0\x9F\x98\x80");
  const std::string r = "\xEF\xBF\xBD";  // U+FFFD
  EXPECT_EQ(clean_text("a\xff"), "a" + r);
  EXPECT_EQ(clean_text("\xC0\xAF"), r + r);                  // an overlong '/'
  EXPECT_EQ(clean_text("\xE0\x80\xAF"), r + r + r);          // another, in three bytes
  EXPECT_EQ(clean_text("\xED\xA0\x80"), r + r + r);          // a surrogate
  EXPECT_EQ(clean_text("x\xE2\x82"), "x" + r + r);           // cut short
  EXPECT_EQ(clean_text("\xF4\x90\x80\x80"), r + r + r + r);  // past U+10FFFF
  EXPECT_EQ(clean_text("a\tb\nc\x7F"
                       "d\xC2\x85"),
            "a b c d ");  // C0, DEL, C1
  EXPECT_EQ(clean_text(std::string("a\0b", 3)), "a b");
}

TEST(Text, CutsToAWidthWithAnEllipsis) {
  EXPECT_EQ(fit_text("short", 1000, 10), "short");
  EXPECT_EQ(fit_text("a\x01"
                     "b\xff",
                     1000, 10),
            "a b\xEF\xBF\xBD");  // cleaned too
  // 0.6 * 10 = 6 pixels a character: 30 pixels hold 5, so 4 and the ellipsis
  EXPECT_EQ(fit_text("abcdefghij", 30, 10), "abcd\xE2\x80\xA6");
  EXPECT_EQ(fit_text("\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9", 30, 10),
            "\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xE2\x80\xA6");  // whole characters
  EXPECT_DOUBLE_EQ(text_width("\xC3\xA9t\xC3\xA9", 10), 18);
}

}  // namespace
}  // namespace braid::report
