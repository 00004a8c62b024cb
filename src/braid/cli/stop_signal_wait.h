// For commands that serve until stopped (braid store, braid serve, braid worker): SIGINT and
// SIGTERM wake the main thread through a pipe. A handler, not a blocked mask and sigwait:
// threads that exist before main() (OpenBLAS's pool) do not inherit a mask set here, so a
// signal arriving before sigwait would reach one of them and kill the process.
#pragma once

namespace braid::cli {

// Installs the handlers (once; `who` names the command in an error).
void catch_stop_signals(const char* who);
// Waits up to `timeout_ms` (-1: for ever) for SIGINT or SIGTERM; returns which, or 0.
int wait_for_stop_signal(int timeout_ms = -1);

}  // namespace braid::cli
