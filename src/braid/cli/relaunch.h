// A benchmark given `-n N` outside a job re-executes itself as N local ranks under
// `braid launch`, so one command measures a multi-rank run.
#pragma once

#include <string>

namespace braid::cli {

// Replaces this process with `braid launch -n ranks [--transport t] -- braid <same args>`.
// `transport` "auto" adds no flag. Throws IoError only if the exec fails.
[[noreturn]] void relaunch_as_ranks(int ranks, const std::string& transport);

}  // namespace braid::cli
