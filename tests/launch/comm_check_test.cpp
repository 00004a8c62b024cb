// Joining a job for real: `braid launch -n N -- braid comm-check` over shm and tcp (each
// rank checks allreduce results against closed forms), ranks started by hand with
// torchrun's variables (rank 0 hosts the store), a hung rank turning into a TimeoutError
// that names it, a failing rank stopping the job, and a multi-rank job without a secret.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "braid_process.h"

namespace {

// braid with `args`, the test's environment plus `vars`; stdout and stderr together.
class Braid : public braid::testing::Process {
 public:
  Braid(const std::vector<std::string>& args, const std::map<std::string, std::string>& vars = {})
      : Process(with_binary(args), vars) {}
  static int count(const std::string& s, const std::string& word) { return occurrences(s, word); }

 private:
  static std::vector<std::string> with_binary(const std::vector<std::string>& args) {
    std::vector<std::string> all = {BRAID_BINARY};
    all.insert(all.end(), args.begin(), args.end());
    return all;
  }
};

using braid::testing::contains;

void expect_every_rank_ok(const std::string& out, int n, const std::string& transport) {
  for (int r = 0; r < n; ++r) {
    const std::string line =
        "rank " + std::to_string(r) + "/" + std::to_string(n) + " ok: transport " + transport;
    EXPECT_TRUE(contains(out, line)) << "no '" << line << "' in:\n" << out;
  }
}

// A port nobody listens on right now (the kernel's next ephemeral one); only for the
// hand-started job below, whose rank 0 must bind a port known in advance.
int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

TEST(CommCheck, SingleProcessNeedsNoLauncher) {
  Braid b({"comm-check"});
  ASSERT_EQ(b.finish(), 0) << b.output();
  EXPECT_TRUE(contains(b.output(), "rank 0/1 ok")) << b.output();
}

class LaunchedCommCheck : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(LaunchedCommCheck, EveryRankChecksOut) {
  const auto& [n, transport] = GetParam();
  Braid b({"launch", "-n", std::to_string(n), "--timeout", "60", "--", BRAID_BINARY, "comm-check",
           "--transport", transport});
  ASSERT_EQ(b.finish(), 0) << b.output();
  expect_every_rank_ok(b.output(), n, transport);
  // The launcher sets torchrun's variables too; braid's own are the ones read.
  EXPECT_EQ(Braid::count(b.output(), "braid's variables"), n) << b.output();
}

INSTANTIATE_TEST_SUITE_P(Transports, LaunchedCommCheck,
                         ::testing::Combine(::testing::Values(2, 3),
                                            ::testing::Values("shm", "tcp")));

TEST(CommCheck, LauncherPassesTheTransportOn) {
  Braid b({"launch", "-n", "2", "--transport", "tcp", "--", BRAID_BINARY, "comm-check",
           "--elements", "7", "100003"});
  ASSERT_EQ(b.finish(), 0) << b.output();
  expect_every_rank_ok(b.output(), 2, "tcp");
  EXPECT_TRUE(contains(b.output(), "sum of 7, 100003 elements")) << b.output();
}

TEST(CommCheck, HandStartedRanksWithTorchrunVariables) {
  const std::map<std::string, std::string> common = {
      {"WORLD_SIZE", "3"},
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", std::to_string(free_port())},
      {"BRAID_SECRET", "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"},
      {"BRAID_TIMEOUT_S", "60"}};
  std::vector<std::unique_ptr<Braid>> ranks;
  for (int r = 0; r < 3; ++r) {
    auto vars = common;
    vars["RANK"] = std::to_string(r);
    ranks.push_back(std::make_unique<Braid>(
        std::vector<std::string>{"comm-check", "--elements", "1000"}, vars));
  }
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(ranks[r]->finish(), 0) << ranks[r]->output();
    EXPECT_TRUE(contains(ranks[r]->output(), "rank " + std::to_string(r) + "/3 ok"))
        << ranks[r]->output();
    EXPECT_TRUE(contains(ranks[r]->output(), "torchrun's variables")) << ranks[r]->output();
  }
}

TEST(CommCheck, HungRankBecomesATimeoutNamingIt) {
  Braid b({"launch", "-n", "2", "--timeout", "3", "--", BRAID_BINARY, "comm-check", "--hang-rank",
           "1"});
  EXPECT_NE(b.finish(), 0) << b.output();
  EXPECT_TRUE(contains(b.output(), "[rank 0] braid: timeout:")) << b.output();
  EXPECT_TRUE(contains(b.output(), "from rank 1")) << b.output();
  // The headline blames the hung rank, not the one that timed out waiting for it.
  EXPECT_TRUE(contains(b.output(),
                       "braid launch: rank 1 stopped making progress: rank 0 exited with code 3 "
                       "after waiting for it; stopped the other rank"))
      << b.output();
}

TEST(CommCheck, HungRankOfThreeOverTcp) {
  Braid b({"launch", "-n", "3", "--timeout", "3", "--transport", "tcp", "--", BRAID_BINARY,
           "comm-check", "--hang-rank", "1"});
  EXPECT_NE(b.finish(), 0) << b.output();
  EXPECT_TRUE(contains(b.output(), "braid: timeout:")) << b.output();
  EXPECT_TRUE(contains(b.output(), "rank 1")) << b.output();
  EXPECT_TRUE(contains(b.output(), "braid launch: rank ")) << b.output();
}

TEST(CommCheck, FailingRankZeroStopsTheJobButNotTheStore) {
  // The launcher hosts the store, so rank 0's exit is reported as such, not as others
  // losing their store.
  Braid b({"launch", "-n", "3", "--", BRAID_BINARY, "comm-check", "--fail-rank", "0", "--fail-code",
           "5"});
  EXPECT_EQ(b.finish(), 5) << b.output();
  EXPECT_TRUE(
      contains(b.output(), "braid launch: rank 0 exited with code 5; stopped the other 2 ranks"))
      << b.output();
}

TEST(CommCheck, SeveralRanksWithoutASecretAreRefused) {
  Braid b({"comm-check"},
          {{"BRAID_RANK", "1"}, {"BRAID_WORLD_SIZE", "2"}, {"BRAID_STORE_ADDR", "127.0.0.1:9"}});
  EXPECT_EQ(b.finish(), 1) << b.output();
  EXPECT_TRUE(contains(b.output(), "BRAID_SECRET")) << b.output();
  EXPECT_TRUE(contains(b.output(), "braid launch")) << b.output();
}

TEST(CommCheck, BadEnvironmentIsNamed) {
  Braid b({"comm-check"}, {{"BRAID_RANK", "2"}, {"BRAID_WORLD_SIZE", "2"}});
  EXPECT_EQ(b.finish(), 1) << b.output();
  EXPECT_TRUE(contains(b.output(), "BRAID_RANK=2 but BRAID_WORLD_SIZE=2")) << b.output();
}

}  // namespace
