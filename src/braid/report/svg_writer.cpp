#include "report/svg_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace braid::report {
namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return std::string(buf) == "-0.0" ? "0.0" : buf;
}

std::string hex(Color c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", c.r, c.g, c.b);
  return buf;
}

const char* anchor_name(Anchor a) {
  return a == Anchor::start ? "start" : a == Anchor::middle ? "middle" : "end";
}

// Appends each part: no temporaries strung together with + (GCC 12 reads those as
// overlapping copies, -Wrestrict).
template <typename... Parts>
void put(std::string& out, const Parts&... parts) {
  (out.append(parts), ...);
}

void write_curve(std::string& out, const Curve& c) {
  out += "<polyline points=\"";
  for (size_t i = 0; i < c.points.size(); ++i)
    put(out, i > 0 ? " " : "", num(c.points[i].x), ",", num(c.points[i].y));
  put(out, "\" stroke=\"", hex(c.color), "\" stroke-width=\"", num(c.width), "\"><title>",
      xml_escape(c.name), "</title></polyline>\n");
  if (!c.markers) return;
  put(out, "<g fill=\"", hex(c.color), "\" stroke=\"none\">");
  for (const Point& p : c.points)
    put(out, "<circle cx=\"", num(p.x), "\" cy=\"", num(p.y), "\" r=\"2.5\"/>");
  out += "</g>\n";
}

void write_text(std::string& out, const Text& t) {
  put(out, "<text x=\"", num(t.x), "\" y=\"", num(t.y), "\" font-size=\"", num(t.size),
      "\" text-anchor=\"", anchor_name(t.anchor), "\" fill=\"", hex(t.color), "\"");
  if (t.bold) out += " font-weight=\"bold\"";
  if (t.vertical) put(out, " transform=\"rotate(-90 ", num(t.x), " ", num(t.y), ")\"");
  put(out, ">", xml_escape(t.text), "</text>\n");
}

}  // namespace

std::string xml_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string svg_document(const Figure& f) {
  const std::string w = std::to_string(f.width), h = std::to_string(f.height);
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  put(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"", w, "\" height=\"",
      h, "\" viewBox=\"0 0 ", w, " ", h,
      "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n");
  put(out, "<rect x=\"0\" y=\"0\" width=\"", w, "\" height=\"", h, "\" fill=\"", hex(f.background),
      "\"/>\n");
  out += "<g fill=\"none\">\n";
  for (const Line& l : f.lines)
    put(out, "<line x1=\"", num(l.x1), "\" y1=\"", num(l.y1), "\" x2=\"", num(l.x2), "\" y2=\"",
        num(l.y2), "\" stroke=\"", hex(l.color), "\" stroke-width=\"", num(l.width), "\"/>\n");
  out += "</g>\n";
  for (const Panel& p : f.panels) {
    put(out, "<g fill=\"none\" stroke-linejoin=\"round\"><title>", xml_escape(p.title),
        "</title>\n");
    for (const Curve& c : p.curves) write_curve(out, c);
    out += "</g>\n";
  }
  for (const Text& t : f.texts) write_text(out, t);
  out += "</svg>\n";
  return out;
}

void write_svg(const Figure& f, const std::string& path) {
  const std::string doc = svg_document(f);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) BRAID_THROW(IoError, "cannot create '", path, "': ", std::strerror(errno));
  out.write(doc.data(), static_cast<std::streamsize>(doc.size()));
  out.close();
  if (!out) BRAID_THROW(IoError, "cannot write '", path, "': ", std::strerror(errno));
}

}  // namespace braid::report
