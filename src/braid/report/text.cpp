#include "report/text.h"

#include <cstdint>

namespace braid::report {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD
constexpr double kGlyphWidth = 0.6;              // of the font size, on average

// The length of the valid UTF-8 sequence at s[i] and its code point, or 0.
size_t decode(const std::string& s, size_t i, uint32_t& cp) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b = byte(i);
  size_t len;
  if (b < 0x80) {
    cp = b;
    return 1;
  } else if (b >= 0xC2 && b <= 0xDF) {
    len = 2, cp = b & 0x1F;
  } else if (b >= 0xE0 && b <= 0xEF) {
    len = 3, cp = b & 0x0F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4, cp = b & 0x07;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  static constexpr uint32_t kLeast[] = {0, 0, 0x80, 0x800, 0x10000};  // overlong below
  if (cp < kLeast[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  if (cp == 0xFFFE || cp == 0xFFFF) return 0;
  return len;
}

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (const char c : s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace

std::string clean_text(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const size_t len = decode(s, i, cp);
    if (len == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F))
      out += ' ';
    else
      out.append(s, i, len);
    i += len;
  }
  return out;
}

double text_width(const std::string& s, double size) {
  return static_cast<double>(code_points(s)) * size * kGlyphWidth;
}

std::string fit_text(const std::string& s, double width, double size) {
  std::string text = clean_text(s);
  if (text_width(text, size) <= width) return text;
  const auto fits = static_cast<size_t>(width / (size * kGlyphWidth));
  std::string cut;
  size_t n = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const bool starts = (static_cast<uint8_t>(text[i]) & 0xC0) != 0x80;
    if (starts && ++n > fits - (fits > 0)) break;  // room for the ellipsis
    cut += text[i];
  }
  return cut + "\xE2\x80\xA6";  // U+2026
}

}  // namespace braid::report
