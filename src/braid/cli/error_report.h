// How a command's error reaches the user: one line on stderr, "braid: <kind><what>" (the
// check's source location only with BRAID_LOG=debug), and an
// exit code by kind (a timeout 3, an I/O error 2, any other braid::Error 1, anything else an
// internal error, 70). A command may print it early, while what its unwinding destroys still
// lives: a parameter-server worker tells the servers it failed as it unwinds, the launcher
// may stop this process at once after, and the line would be lost. main() then does not
// print the same exception again.
#pragma once

#include <exception>

namespace braid::cli {

// Prints `e`'s line unless it was printed already; returns its exit code.
int report_error(const std::exception& e);

// Prints `e`'s line now (the caller rethrows `e` itself, with `throw;`).
void report_error_now(const std::exception& e);

}  // namespace braid::cli
