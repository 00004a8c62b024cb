// A figure (figure.h) as a PNG of its width and height in pixels, drawn with cairo
// (antialiased; text through cairo's toy font API in DejaVu Sans, or fontconfig's nearest
// sans-serif). Lines of odd width along the axes are put on pixel centres, so a 1-pixel
// grid line is one sharp pixel wide.
//
// Not to be called beside other users of cairo or fontconfig in the process (braid has
// none): it releases their process-wide font caches as it returns, so nothing outlives it.
#pragma once

#include <string>

#include "report/figure.h"

namespace braid::report {

// Throws IoError where `path` cannot be written, braid::Error where cairo fails to draw.
void write_png(const Figure& f, const std::string& path);

}  // namespace braid::report
