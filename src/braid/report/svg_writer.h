// A figure (figure.h) as SVG 1.1, written by hand: one <line> per line, a <polyline> per
// curve (its name in a <title>, which viewers show on hover) with a <circle> per marker,
// and a <text> per text, every string XML-escaped. Coordinates to a tenth of a pixel.
#pragma once

#include <string>

#include "report/figure.h"

namespace braid::report {

// `s` with &, <, >, " and ' as XML's entities.
std::string xml_escape(const std::string& s);

// The whole document.
std::string svg_document(const Figure& f);

// Writes svg_document(f) to `path`; throws IoError where it cannot.
void write_svg(const Figure& f, const std::string& path);

}  // namespace braid::report
