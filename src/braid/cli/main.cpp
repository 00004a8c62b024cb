// braid: the command-line entry point. Parses flags with CLI11 and hands off to one
// command per file; maps errors to exit codes and one clear line for the user.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "cli/error_report.h"
#include "core/error.h"
#include "core/gemm_choice.h"
#include "core/log.h"
#include "nn/conv_choice.h"
#include "train/kernel_cache.h"

namespace {

std::string subcommand_names(const CLI::App& app) {
  std::string names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    names += (names.empty() ? "" : ", ") + sub->get_name();
  return names;
}

// BRAID_KERNEL_CACHE: the kernel cache's directory (train/kernel_cache.h), or "off";
// unset: $XDG_CACHE_HOME/braid, else $HOME/.cache/braid.
std::string kernel_cache_dir() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v != nullptr ? v : "";
  };
  const std::string set = env("BRAID_KERNEL_CACHE");
  if (set == "off") return "";
  if (!set.empty()) return set;
  if (const std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty()) return xdg + "/braid";
  if (const std::string home = env("HOME"); !home.empty()) return home + "/.cache/braid";
  return "";
}

// BRAID_GEMM and BRAID_CONV force one GEMM library or convolution algorithm instead of
// choosing per shape (core/gemm_choice.h, nn/conv_choice.h).
void apply_kernel_policies() {
  braid::train::set_kernel_cache_dir(kernel_cache_dir());
  try {
    if (const char* v = std::getenv("BRAID_GEMM"); v != nullptr && *v != '\0')
      braid::set_gemm_policy(braid::parse_gemm_policy(v));
  } catch (const braid::Error& e) {
    BRAID_THROW(braid::Error, "environment variable BRAID_GEMM: ", e.what());
  }
  try {
    if (const char* v = std::getenv("BRAID_CONV"); v != nullptr && *v != '\0')
      braid::nn::set_conv_policy(braid::nn::parse_conv_policy(v));
  } catch (const braid::Error& e) {
    BRAID_THROW(braid::Error, "environment variable BRAID_CONV: ", e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"braid: distributed deep-learning training engine"};
  app.set_version_flag("--version", std::string("braid ") + BRAID_VERSION);
  app.require_subcommand(1);
  braid::cli::add_train_command(app);
  braid::cli::add_eval_command(app);
  braid::cli::add_plot_command(app);
  braid::cli::add_bench_command(app);
  braid::cli::add_store_command(app);
  braid::cli::add_launch_command(app);
  braid::cli::add_comm_check_command(app);
  braid::cli::add_serve_command(app);
  braid::cli::add_worker_command(app);
  braid::cli::add_job_commands(app);
  braid::cli::add_plan_command(app);
  try {
    apply_kernel_policies();
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();  // a command's exit code with nothing to say (a stop by signal)
  } catch (const CLI::ParseError& e) {
    // CLI11 says "A subcommand is required" or "The following argument was not expected:
    // foo" when the first word is not a command; name the commands instead.
    const bool no_command =
        app.get_subcommands().empty() && e.get_exit_code() != 0 &&
        (dynamic_cast<const CLI::RequiredError*>(&e) || dynamic_cast<const CLI::ExtrasError*>(&e));
    if (no_command) {
      const auto extras = app.remaining();
      if (extras.empty())
        std::fprintf(stderr, "braid: which command? one of: %s (braid --help)\n",
                     subcommand_names(app).c_str());
      else
        std::fprintf(stderr, "braid: unknown command '%s'; the commands are: %s (braid --help)\n",
                     extras.front().c_str(), subcommand_names(app).c_str());
      return 2;
    }
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // One line, as every other error: under a launcher the job's last line repeats it
    // (CLI11's own two lines end in "Run with --help for more information.").
    const auto used = app.get_subcommands();
    const std::string help =
        used.empty() ? "braid --help" : "braid " + used.front()->get_name() + " --help";
    std::fprintf(stderr, "braid: error: %s (%s lists the flags)\n", e.what(), help.c_str());
    return e.get_exit_code();
  } catch (const std::exception& e) {
    return braid::cli::report_error(e);
  }
  return 0;
}
