// `braid plot RUN_DIR [-o FILE]`: draws a run's curves (loss, eval accuracy, throughput,
// learning rate against steps) from its metrics.jsonl, with no server and nothing but the
// file: finished, stopped or still running. The output's extension picks the format, .svg
// (the default, RUN_DIR/curves.svg) or .png; prints the path it wrote.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "report/figure.h"
#include "report/png_writer.h"
#include "report/run_curves.h"
#include "report/svg_writer.h"

namespace braid::cli {
namespace {

namespace fs = std::filesystem;

struct PlotFlags {
  std::string run;
  std::string output;
  std::string title;
  int width = 1200;
  int height = 800;
};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// The run's name for the title: its directory's, "runs/cnn/" and "runs/cnn" alike.
std::string run_name(const fs::path& dir) {
  std::error_code ec;
  const fs::path full = fs::weakly_canonical(fs::absolute(dir), ec);
  const std::string name = (ec ? dir : full).filename().string();
  return name.empty() ? dir.string() : name;
}

void run_plot(const PlotFlags& f) {
  const fs::path dir = fs::is_regular_file(f.run) ? fs::path(f.run).parent_path() : fs::path(f.run);
  const std::string out = f.output.empty() ? (dir / "curves.svg").string() : f.output;
  const std::string ext = lower(fs::path(out).extension().string());
  if (ext != ".svg" && ext != ".png")
    BRAID_THROW(Error, "cannot tell the format of '", out,
                "' from its extension: name a .svg or a .png file");
  const report::RunCurves curves = report::read_run_curves(f.run);
  report::FigureOptions options;
  options.width = f.width;
  options.height = f.height;
  options.title = f.title.empty() ? run_name(dir.empty() ? fs::path(".") : dir) : f.title;
  const report::Figure figure = report::layout_figure(curves, options);
  if (ext == ".svg")
    report::write_svg(figure, out);
  else
    report::write_png(figure, out);
  std::printf("%s\n", out.c_str());
}

}  // namespace

void add_plot_command(CLI::App& app) {
  auto flags = std::make_shared<PlotFlags>();
  CLI::App* cmd = app.add_subcommand(
      "plot", "Draw a run's curves (loss, accuracy, throughput, learning rate) as SVG or PNG");
  cmd->add_option("RUN_DIR", flags->run, "the run's --out directory (or its metrics.jsonl)")
      ->required();
  cmd->add_option("-o,--output", flags->output,
                  "the file to write, .svg or .png (default: RUN_DIR/curves.svg)");
  cmd->add_option("--width", flags->width, "pixels")
      ->check(CLI::Range(600, 8000))
      ->capture_default_str();
  cmd->add_option("--height", flags->height, "pixels")
      ->check(CLI::Range(400, 8000))
      ->capture_default_str();
  cmd->add_option("--title", flags->title, "the figure's title (default: the run's name)");
  cmd->callback([flags] { run_plot(*flags); });
}

}  // namespace braid::cli
