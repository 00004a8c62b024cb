// Runs the braid executable as a user would, through the shell, and keeps what it printed.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace braid::testing {

struct BraidResult {
  int code;            // exit status, or -1 when killed by a signal
  std::string output;  // stdout and stderr together
};

// `braid ARGS`; `prefix` goes before it on the command line ("cd / &&", "BRAID_LOG=debug").
inline BraidResult run_braid(const std::string& args, const std::string& prefix = "") {
  const std::string cmd = prefix + " " + std::string(BRAID_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace braid::testing
