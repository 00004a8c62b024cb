// Text as a figure holds it: valid UTF-8 with no control characters, whatever a run's name
// or a file held, so an SVG parser and cairo accept every string. Widths are estimates
// (a sans-serif glyph averages 0.6 of the font size), for laying out legends and cutting
// long titles, not for exact placement.
#pragma once

#include <string>

namespace braid::report {

// `s` with each byte that is not part of a valid UTF-8 sequence (or encodes a surrogate or
// U+FFFE/U+FFFF) as U+FFFD and each control character (C0, DEL, C1) as a space.
std::string clean_text(const std::string& s);

// The estimated width in pixels of `s` at font size `size`.
double text_width(const std::string& s, double size);

// `s`, cleaned, cut to fit `width` pixels at `size` with "…" at the end where it does not.
std::string fit_text(const std::string& s, double width, double size);

}  // namespace braid::report
