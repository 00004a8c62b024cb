// Multi-host on one machine: four network namespaces joined by veth links and a bridge
// (scripts/netns-cluster.sh), one rank in each, a 4-rank allreduce over the TCP transport
// (`braid comm-check`). Skips, saying why, where namespaces cannot be made (not root, no
// CAP_NET_ADMIN, no iproute2).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <string>
#include <vector>

namespace {

struct Result {
  int code;
  std::string output;
};

Result sh(const std::string& cmd) {
  FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

class NetnsCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    prefix_ = "bt" + std::to_string(::getpid() % 100000);
    script_ = std::string("BRAID_NETNS_PREFIX=") + prefix_ + " " + BRAID_SOURCE_DIR +
              "/scripts/netns-cluster.sh";
    if (::geteuid() != 0) GTEST_SKIP() << "network namespaces need root; skipped";
    const Result probe =
        sh("ip netns add " + prefix_ + "probe && ip netns del " + prefix_ + "probe");
    if (probe.code != 0) GTEST_SKIP() << "cannot create network namespaces here: " << probe.output;
  }
  void TearDown() override {
    if (!prefix_.empty()) sh(script_ + " down");
  }
  Result run_ranks(int hosts, const std::string& braid_args) {
    // Rank 0 hosts the store on its own address; every rank runs in its own namespace.
    std::string cmd;
    for (int r = 0; r < hosts; ++r) {
      cmd += script_ + " exec " + std::to_string(r) + " env BRAID_RANK=" + std::to_string(r) +
             " BRAID_WORLD_SIZE=" + std::to_string(hosts) +
             " BRAID_LOCAL_RANK=0 BRAID_LOCAL_WORLD_SIZE=1 BRAID_STORE_ADDR=10.77.0.1:29400"
             " BRAID_SECRET=00112233445566778899aabbccddeeff BRAID_TIMEOUT_S=60 " +
             BRAID_BINARY + " " + braid_args + " > /tmp/" + prefix_ + "_rank" + std::to_string(r) +
             ".log 2>&1 & ";
    }
    cmd += "fail=0; for j in $(jobs -p); do wait $j || fail=1; done; cat /tmp/" + prefix_ +
           "_rank*.log; rm -f /tmp/" + prefix_ + "_rank*.log; exit $fail";
    return sh("bash -c '" + cmd + "'");
  }
  std::string prefix_, script_;
};

TEST_F(NetnsCluster, FourRankAllreduceOverTcpAcrossFourNamespaces) {
  const Result up = sh(script_ + " up 4");
  ASSERT_EQ(up.code, 0) << up.output;
  const Result r = run_ranks(4, "comm-check --transport tcp");
  EXPECT_EQ(r.code, 0) << r.output;
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_NE(r.output.find("rank " + std::to_string(rank) + "/4 ok"), std::string::npos)
        << r.output;
}

}  // namespace
