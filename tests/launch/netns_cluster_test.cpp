// Multi-host on one machine: network namespaces joined by veth links and a bridge
// (scripts/netns-cluster.sh), one rank in each: a 4-rank allreduce over the TCP transport
// (`braid comm-check`), and two-rank data-parallel `braid train` started by hand with
// braid's own variables (issue 16, point 9: across hosts). Skips, saying why, where
// namespaces cannot be made (not root, no CAP_NET_ADMIN, no iproute2).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "braid_process.h"
#include "ddp_train_run.h"
#include "fashion_mnist_data.h"
#include "temp_dir.h"

namespace {

using braid::testing::Process;

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
    if (::geteuid() != 0) GTEST_SKIP() << "skipped: network namespaces need root";
    const Result probe =
        sh("ip netns add " + prefix_ + "probe && ip netns del " + prefix_ + "probe");
    if (probe.code != 0)
      GTEST_SKIP() << "skipped: cannot create network namespaces here: " << probe.output;
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

// Two hosts, one rank each, as a user starts ranks on two machines: braid's variables
// (rank, world size, this host's one local rank), the store on rank 0's address, one
// secret, tcp. Rank 0 alone prints and writes; the weights are bitwise those of the
// same run under `braid launch -n 2` on one host (ddp_train_run.h says why).
TEST_F(NetnsCluster, TwoRankDdpTrainOverTcpAcrossTwoNamespaces) {
  REQUIRE_FASHION_MNIST();
  const Result up = sh(script_ + " up 2");
  ASSERT_EQ(up.code, 0) << up.output;
  const braid::testing::TempDir tmp;
  const std::string out = tmp.file("out");
  const std::vector<std::string> train =
      braid::testing::ddp_train_command(braid::testing::write_tiny_mlp(tmp), out);
  std::vector<std::unique_ptr<Process>> ranks;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> args = {BRAID_SOURCE_DIR "/scripts/netns-cluster.sh", "exec",
                                     std::to_string(r)};
    args.insert(args.end(), train.begin(), train.end());
    auto vars = braid::testing::job_vars();
    vars.insert({{"BRAID_NETNS_PREFIX", prefix_},
                 {"BRAID_RANK", std::to_string(r)},
                 {"BRAID_WORLD_SIZE", "2"},
                 {"BRAID_LOCAL_RANK", "0"},
                 {"BRAID_LOCAL_WORLD_SIZE", "1"},
                 {"BRAID_STORE_ADDR", "10.77.0.1:29400"},
                 {"BRAID_TRANSPORT", "tcp"}});
    ranks.push_back(std::make_unique<Process>(args, vars));
  }
  std::string output;
  for (int r = 0; r < 2; ++r) {
    const int code = ranks[r]->finish();
    output += "== rank " + std::to_string(r) + " ==\n" + ranks[r]->output();
    EXPECT_EQ(code, 0) << "rank " << r << ":\n" << ranks[r]->output();
  }
  braid::testing::expect_rank_zero_alone_printed(output, {"== rank 0 ==", "== rank 1 =="});
  braid::testing::expect_one_writer_and_reference_weights(out);
}

}  // namespace
