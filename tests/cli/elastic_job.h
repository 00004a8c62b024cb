// Elastic jobs as real processes for the CLI tests: `braid launch` over
// `sh -c 'echo pid $$; exec braid train ...'`, so a test learns every rank's pid (a restart
// prints its own line again) and can kill -9 its own children only.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "launch/braid_process.h"

namespace braid::testing {

constexpr auto kHangLimit = std::chrono::seconds(240);

inline std::string train_command(const std::string& train_args) {
  return "echo pid $$; exec " + std::string(BRAID_BINARY) + " train " + train_args;
}

// `braid launch LAUNCH_ARGS -- sh -c 'echo pid $$; exec braid train TRAIN_ARGS'`.
inline std::unique_ptr<Process> elastic_launch(
    const std::vector<std::string>& launch_args, const std::string& train_args,
    const std::map<std::string, std::string>& vars = {}) {
  std::vector<std::string> argv = {BRAID_BINARY, "launch"};
  argv.insert(argv.end(), launch_args.begin(), launch_args.end());
  for (const char* a : {"--", "sh", "-c"}) argv.emplace_back(a);
  argv.push_back(train_command(train_args));
  return std::make_unique<Process>(argv, vars);
}

// The pid the `count`-th process of rank slot `rank` printed (1: the first, 2: its first
// restart), after waiting for its line; 0 if the output ended first.
inline pid_t rank_pid(Process& p, int rank, int count = 1) {
  const std::string tag = "[rank " + std::to_string(rank) + "] pid ";
  if (!p.wait_for(tag, count)) return 0;
  const std::string& out = p.output();
  size_t at = 0;
  for (int i = 0; i < count; ++i) at = out.find(tag, i == 0 ? 0 : at + 1);
  int pid = 0;
  if (std::sscanf(out.c_str() + at + tag.size(), "%d", &pid) != 1) return 0;
  return pid;
}

}  // namespace braid::testing
