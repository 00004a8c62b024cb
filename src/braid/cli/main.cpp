// braid: the command-line entry point. Parses flags with CLI11 and hands off to one
// command per file; maps errors to exit codes and one clear line for the user.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"braid: distributed deep-learning training engine"};
  app.require_subcommand(1);
  braid::cli::add_train_command(app);
  braid::cli::add_eval_command(app);
  braid::cli::add_bench_command(app);
  braid::cli::add_store_command(app);
  braid::cli::add_launch_command(app);
  braid::cli::add_comm_check_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const braid::TimeoutError& e) {
    std::fprintf(stderr, "braid: timeout: %s\n", e.what());
    return 3;
  } catch (const braid::IoError& e) {
    std::fprintf(stderr, "braid: I/O error: %s\n", e.what());
    return 2;
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "braid: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "braid: internal error: %s\n", e.what());
    return 70;
  }
  return 0;
}
