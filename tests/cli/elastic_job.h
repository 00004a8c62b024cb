// Elastic jobs as real processes for the CLI tests: `braid launch` over
// `sh -c 'echo pid $$; exec braid train ...'`, so a test learns every rank's pid (a restart
// prints its own line again) and can kill -9 its own children only.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cli/fault_helpers.h"
#include "cli/run_braid.h"
#include "cli/same_checkpoint.h"
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

// The NAME=value lines of a `--join-file`: the variables a process started by hand needs.
inline std::map<std::string, std::string> read_join_file(const std::string& path) {
  std::map<std::string, std::string> vars;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    vars[line.substr(0, line.find('='))] = line.substr(line.find('=') + 1);
  return vars;
}

// The step round `round` went on from, from rank 0's "elastic: round R: ... at step S"
// line; -1 if absent.
inline long round_step(const std::string& output, int round) {
  const size_t at = output.find("elastic: round " + std::to_string(round) + ": ");
  if (at == std::string::npos) return -1;
  const size_t step_at = output.find(") at step ", at);
  long step = -1;
  if (step_at == std::string::npos ||
      std::sscanf(output.c_str() + step_at, ") at step %ld", &step) != 1)
    return -1;
  return step;
}

// Kills a random rank of the `ranks` of `job` (rank 0 among the candidates) with SIGKILL at a
// random point of a step, once the job is training, and waits for the job's end, which
// must be a success; returns the victim, or -1 after a test failure.
inline int kill_a_random_rank_and_finish(Process& job, int ranks, std::mt19937& rng) {
  HangGuard guard(job.pid(), kHangLimit);
  const int victim = static_cast<int>(rng() % static_cast<unsigned>(ranks));
  const pid_t pid = rank_pid(job, victim);
  EXPECT_GT(pid, 0) << job.output();
  if (pid <= 0 || !job.wait_for("[rank 0] epoch 1/")) return -1;
  let_it_compute(pid, 5 + static_cast<long>(rng() % 20));
  EXPECT_EQ(::kill(pid, SIGKILL), 0) << job.output();
  const int code = job.finish();
  EXPECT_FALSE(guard.fired()) << job.output();
  EXPECT_EQ(code, 0) << job.output();
  return code == 0 && !guard.fired() ? victim : -1;
}

// The undisturbed job that took a membership change at `step`: `before` ranks trained
// `args_before` up to it and checkpointed into `reference`, then `after` ranks resumed it
// with `args_after` (which name the end). Whether its checkpoint holds the bits of
// `elastic_checkpoint`.
inline ::testing::AssertionResult same_as_stop_and_resume(const std::string& elastic_checkpoint,
                                                          int before,
                                                          const std::string& args_before, int after,
                                                          const std::string& args_after, long step,
                                                          const std::string& reference) {
  const auto first = run_braid("launch -n " + std::to_string(before) + " -- " +
                               std::string(BRAID_BINARY) + " train " + args_before +
                               "--max-steps " + std::to_string(step) + " --out " + reference);
  if (first.code != 0) return ::testing::AssertionFailure() << first.output;
  const auto second =
      run_braid("launch -n " + std::to_string(after) + " -- " + std::string(BRAID_BINARY) +
                " train " + args_after + "--resume " + reference);
  if (second.code != 0) return ::testing::AssertionFailure() << second.output;
  return same_checkpoint(elastic_checkpoint, reference + "/checkpoint");
}

}  // namespace braid::testing
