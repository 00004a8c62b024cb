// `braid bench allreduce` refuses what it cannot measure before any rank starts or any
// buffer is allocated, and says so once: -n 0 (which measured nothing and reported
// petabytes per second), bad sizes, and sizes the host's memory cannot hold
// (MemAvailable), whether it launches its own ranks (-n) or runs under `braid launch`.
#include <string>

#include "core/host_memory.h"
#include "launch/braid_process.h"

namespace braid::testing {
namespace {

int count(const std::string& s, const std::string& word) { return Process::occurrences(s, word); }

TEST(BenchArgs, ZeroRanksIsRefused) {
  Process p({BRAID_BINARY, "bench", "allreduce", "-n", "0", "--min", "4K", "--max", "4K"});
  EXPECT_NE(p.finish(), 0) << p.output();
  EXPECT_TRUE(contains(p.output(), "--ranks")) << p.output();
  EXPECT_FALSE(contains(p.output(), "GB/s")) << p.output();
}

TEST(BenchArgs, BadSizesAreSaidOnceBeforeRanksStart) {
  Process p({BRAID_BINARY, "bench", "allreduce", "-n", "2", "--min", "8K", "--max", "4K"});
  EXPECT_EQ(p.finish(), 1) << p.output();
  EXPECT_EQ(count(p.output(), "need 4 <= --min <= --max"), 1) << p.output();
  EXPECT_FALSE(contains(p.output(), "[rank")) << "ranks were started:\n" << p.output();
}

TEST(BenchArgs, UnderALauncherOneRankSaysIt) {
  Process p(
      {BRAID_BINARY, "launch", "-n", "3", "--", BRAID_BINARY, "bench", "allreduce", "--max", "4Q"});
  EXPECT_NE(p.finish(), 0) << p.output();
  // One rank says it; the launcher's last line then repeats that rank's words.
  EXPECT_EQ(count(p.output(), "] braid: error: --max '4Q': unknown unit 'Q'"), 1) << p.output();
  EXPECT_TRUE(contains(p.output(), "Last line rank 0 wrote to stderr: braid: error: --max '4Q'"))
      << p.output();
}

TEST(BenchArgs, MoreThanTheHostsAvailableMemoryIsRefusedFirst) {
  const std::optional<uint64_t> available = mem_available_bytes();
  if (!available) GTEST_SKIP() << "no MemAvailable in /proc/meminfo";
  // One rank's buffers alone exceed what the host has.
  const std::string size = std::to_string(*available + 1);
  Process p({BRAID_BINARY, "bench", "allreduce", "-n", "2", "--min", size, "--max", size});
  EXPECT_EQ(p.finish(), 1) << p.output();
  EXPECT_EQ(count(p.output(), "bench allreduce: --max " + size + " needs "), 1) << p.output();
  EXPECT_TRUE(contains(p.output(), " per rank (send and receive buffers) x 2 ranks on this host"))
      << p.output();
  EXPECT_TRUE(contains(p.output(), "MemAvailable")) << p.output();
  EXPECT_FALSE(contains(p.output(), "[rank")) << "ranks were started:\n" << p.output();
}

TEST(BenchArgs, UnderALauncherTheMemoryCheckCountsEveryLocalRank) {
  const std::optional<uint64_t> available = mem_available_bytes();
  if (!available) GTEST_SKIP() << "no MemAvailable in /proc/meminfo";
  // Too much for one rank even (never allocate for real if the check breaks); the message
  // shows the need counted for all four ranks on the host (the sum: HostMemory test).
  const std::string size = std::to_string(*available + 1);
  Process p({BRAID_BINARY, "launch", "-n", "4", "--", BRAID_BINARY, "bench", "allreduce", "--min",
             size, "--max", size});
  EXPECT_NE(p.finish(), 0) << p.output();
  // One rank says it (the launcher's last line repeats it).
  EXPECT_EQ(count(p.output(), "] braid: error: bench allreduce: --max "), 1) << p.output();
  EXPECT_TRUE(contains(p.output(), "x 4 ranks on this host")) << p.output();
}

}  // namespace
}  // namespace braid::testing
