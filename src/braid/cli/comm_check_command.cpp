// `braid comm-check`: a diagnostic rank that joins the job, allreduces f32 and i64 sums
// of a few sizes, in private memory and in a shared buffer (comm/shared_buffer.h), checks
// them against closed forms, meets the others at a barrier and prints "rank r/n ok: ...". Used by
// the launch and multi-host tests; --fail-rank and
// --hang-rank make one rank misbehave so tests can watch the others and the launcher.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/error_report.h"
#include "comm/collectives.h"
#include "comm/shared_buffer.h"
#include "core/error.h"
#include "launch/job.h"

namespace braid::cli {
namespace {

struct CommCheckFlags {
  std::string transport;
  std::vector<int64_t> elements = {0, 1, 1000, int64_t{1} << 20};
  int fail_rank = -1;
  int fail_code = 1;
  int hang_rank = -1;
};

// Rank r contributes (r+1) * (1 + i % 97) at element i: small integers, so every partial
// sum is exact in f32 whatever the algorithm's order, and the total has a closed form.
void check_f32(comm::Group& g, float* data, int64_t count, const std::string& where) {
  const int64_t n = g.size(), r = g.rank();
  for (int64_t i = 0; i < count; ++i)
    data[static_cast<size_t>(i)] = static_cast<float>((r + 1) * (1 + i % 97));
  comm::allreduce(g, data, static_cast<size_t>(count), DType::f32, ReduceOp::sum);
  for (int64_t i = 0; i < count; ++i) {
    const float expected = static_cast<float>((1 + i % 97) * n * (n + 1) / 2);
    if (data[static_cast<size_t>(i)] != expected)
      BRAID_THROW(Error, "comm-check: ", where, ": allreduce f32 sum of ", count,
                  " elements: element ", i, " is ", data[static_cast<size_t>(i)], ", expected ",
                  expected);
  }
}

// Rank r contributes (r+1) * (i+1) * 1000003 + r: uses the high bits, still far from overflow.
void check_i64(comm::Group& g, int64_t* data, int64_t count, const std::string& where) {
  const int64_t n = g.size(), r = g.rank();
  for (int64_t i = 0; i < count; ++i)
    data[static_cast<size_t>(i)] = (r + 1) * (i + 1) * 1000003 + r;
  comm::allreduce(g, data, static_cast<size_t>(count), DType::i64, ReduceOp::sum);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t expected = (i + 1) * 1000003 * (n * (n + 1) / 2) + n * (n - 1) / 2;
    if (data[static_cast<size_t>(i)] != expected)
      BRAID_THROW(Error, "comm-check: ", where, ": allreduce i64 sum of ", count,
                  " elements: element ", i, " is ", data[static_cast<size_t>(i)], ", expected ",
                  expected);
  }
}

void check_job(launch::Job& job, const CommCheckFlags& f) {
  comm::Group& g = *job.world;
  const std::string where = "rank " + std::to_string(g.rank()) + "/" + std::to_string(g.size()) +
                            " over " + std::string(g.transport().name());
  if (g.rank() == f.fail_rank) {
    std::fprintf(stderr, "comm-check: %s: exiting with code %d as asked (--fail-rank)\n",
                 where.c_str(), f.fail_code);
    std::fflush(nullptr);
    ::_exit(f.fail_code);
  }
  if (g.rank() == f.hang_rank) {
    std::fprintf(stderr, "comm-check: %s: hanging as asked (--hang-rank)\n", where.c_str());
    std::fflush(nullptr);
    while (true) ::pause();
  }
  int64_t most = 0;
  for (int64_t count : f.elements) {
    BRAID_CHECK(count >= 0, "comm-check: --elements must be >= 0, got ", count);
    most = std::max(most, count);
  }
  std::vector<float> own_f32(static_cast<size_t>(most));
  std::vector<int64_t> own_i64(static_cast<size_t>(most));
  const comm::SharedBuffer shared = comm::allocate_shared(g, static_cast<size_t>(most) * 8);
  std::string sizes;
  for (int64_t count : f.elements) {
    check_f32(g, own_f32.data(), count, where);
    check_i64(g, own_i64.data(), count, where);
    check_f32(g, shared.as<float>(), count, where + ", shared buffer");
    check_i64(g, shared.as<int64_t>(), count, where + ", shared buffer");
    sizes += (sizes.empty() ? "" : ", ") + std::to_string(count);
  }
  comm::barrier(g);
  const std::string source =
      job.env.source == "none" ? "single process" : job.env.source + "'s variables";
  std::printf(
      "rank %d/%d ok: transport %s, %s, allreduce f32 and i64 sum of %s elements, in private "
      "memory and in a %s\n",
      g.rank(), g.size(), std::string(g.transport().name()).c_str(), source.c_str(), sizes.c_str(),
      shared.shared() ? "shared buffer read in place" : "shared buffer (private here)");
  std::fflush(stdout);
}

void run_comm_check(const CLI::App& cmd, const CommCheckFlags& f) {
  launch::JoinOptions options;
  if (cmd.count("--transport") > 0) options.transport = comm::parse_transport_kind(f.transport);
  launch::Job job = launch::join_job(options);
  try {
    check_job(job, f);
  } catch (const std::exception& e) {
    // Said while the job's transport is open: once it closes, a peer fails on that and the
    // launcher may stop this process before its own line (a timeout naming the hung rank)
    // is written.
    report_error_now(e);
    throw;
  }
}

}  // namespace

void add_comm_check_command(CLI::App& app) {
  auto flags = std::make_shared<CommCheckFlags>();
  CLI::App* cmd = app.add_subcommand(
      "comm-check",
      "Diagnostic: join the job, check allreduce results and a barrier on every rank");
  cmd->add_option("--transport", flags->transport,
                  "auto, shm or tcp (default: BRAID_TRANSPORT or auto)")
      ->check(CLI::IsMember({"auto", "shm", "tcp"}));
  cmd->add_option("--elements", flags->elements,
                  "Element counts to allreduce (default 0 1 1000 1048576)");
  cmd->add_option("--fail-rank", flags->fail_rank,
                  "This rank exits with --fail-code after joining");
  cmd->add_option("--fail-code", flags->fail_code, "Exit code of --fail-rank (default 1)");
  cmd->add_option("--hang-rank", flags->hang_rank, "This rank sleeps forever after joining");
  cmd->callback([cmd, flags] { run_comm_check(*cmd, *flags); });
}

}  // namespace braid::cli
