#include "report/png_writer.h"

#include <cairo.h>
#include <fontconfig/fontconfig.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numbers>

#include "core/error.h"

namespace braid::report {
namespace {

// cairo's font faces and fontconfig's configuration are process-wide caches that live
// until exit, which LeakSanitizer (the ASan build's tests, braid itself among them) counts
// as leaks. Released as write_png returns or throws, after its surface and context.
struct FontCachesRelease {
  ~FontCachesRelease() {
    cairo_debug_reset_static_data();
    FcFini();
  }
};

struct SurfaceFree {
  void operator()(cairo_surface_t* s) const { cairo_surface_destroy(s); }
};
struct ContextFree {
  void operator()(cairo_t* c) const { cairo_destroy(c); }
};

void set_color(cairo_t* cr, Color c) {
  cairo_set_source_rgb(cr, c.r / 255.0, c.g / 255.0, c.b / 255.0);
}

// A coordinate across a line of odd whole width, moved to a pixel's centre.
double crisp(double v, double width) {
  const bool odd = std::fmod(width, 2.0) == 1.0;
  return odd ? std::floor(v) + 0.5 : v;
}

void draw_line(cairo_t* cr, const Line& l) {
  double x1 = l.x1, y1 = l.y1, x2 = l.x2, y2 = l.y2;
  if (x1 == x2) x1 = x2 = crisp(x1, l.width);
  if (y1 == y2) y1 = y2 = crisp(y1, l.width);
  set_color(cr, l.color);
  cairo_set_line_width(cr, l.width);
  cairo_move_to(cr, x1, y1);
  cairo_line_to(cr, x2, y2);
  cairo_stroke(cr);
}

void draw_curve(cairo_t* cr, const Curve& c) {
  if (c.points.empty()) return;
  set_color(cr, c.color);
  cairo_set_line_width(cr, c.width);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  cairo_move_to(cr, c.points[0].x, c.points[0].y);
  for (const Point& p : c.points) cairo_line_to(cr, p.x, p.y);
  cairo_stroke(cr);
  if (!c.markers) return;
  for (const Point& p : c.points) {
    cairo_new_sub_path(cr);
    cairo_arc(cr, p.x, p.y, 2.5, 0, 2 * std::numbers::pi);
  }
  cairo_fill(cr);
}

void draw_text(cairo_t* cr, const Text& t) {
  cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL,
                         t.bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, t.size);
  cairo_text_extents_t ext;
  cairo_text_extents(cr, t.text.c_str(), &ext);
  const double shift = t.anchor == Anchor::start    ? 0
                       : t.anchor == Anchor::middle ? ext.x_advance / 2
                                                    : ext.x_advance;
  cairo_save(cr);
  cairo_translate(cr, t.x, t.y);
  if (t.vertical) cairo_rotate(cr, -std::numbers::pi / 2);
  set_color(cr, t.color);
  cairo_move_to(cr, -shift, 0);
  cairo_show_text(cr, t.text.c_str());
  cairo_restore(cr);
}

cairo_status_t write_to(void* file, const unsigned char* data, unsigned int length) {
  const size_t n = std::fwrite(data, 1, length, static_cast<std::FILE*>(file));
  return n == length ? CAIRO_STATUS_SUCCESS : CAIRO_STATUS_WRITE_ERROR;
}

}  // namespace

void write_png(const Figure& f, const std::string& path) {
  const FontCachesRelease release;  // destroyed last
  const std::unique_ptr<cairo_surface_t, SurfaceFree> surface(
      cairo_image_surface_create(CAIRO_FORMAT_RGB24, f.width, f.height));
  BRAID_CHECK(cairo_surface_status(surface.get()) == CAIRO_STATUS_SUCCESS, "cannot make a ",
              f.width, "x", f.height,
              " image: ", cairo_status_to_string(cairo_surface_status(surface.get())));
  const std::unique_ptr<cairo_t, ContextFree> context(cairo_create(surface.get()));
  cairo_t* cr = context.get();
  set_color(cr, f.background);
  cairo_paint(cr);
  for (const Line& l : f.lines) draw_line(cr, l);
  for (const Panel& p : f.panels)
    for (const Curve& c : p.curves) draw_curve(cr, c);
  for (const Text& t : f.texts) draw_text(cr, t);
  BRAID_CHECK(cairo_status(cr) == CAIRO_STATUS_SUCCESS,
              "cannot draw the figure: ", cairo_status_to_string(cairo_status(cr)));
  cairo_surface_flush(surface.get());
  // Through a FILE of our own, so a failure says why (cairo's own says "error while
  // writing to output stream").
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) BRAID_THROW(IoError, "cannot create '", path, "': ", std::strerror(errno));
  const cairo_status_t status = cairo_surface_write_to_png_stream(surface.get(), write_to, file);
  const int write_errno = errno;
  const bool closed = std::fclose(file) == 0;
  if (status != CAIRO_STATUS_SUCCESS || !closed)
    BRAID_THROW(IoError, "cannot write '", path,
                "': ", std::strerror(closed ? write_errno : errno));
}

}  // namespace braid::report
