// Issue 29: elastic DDP over several hosts, one `braid launch --nnodes MIN:MAX` agent per
// host, as real processes: two agents on this machine that lose a rank to kill -9 and go
// on; two "hosts" in network namespaces (scripts/netns-cluster.sh) whose link is cut mid-run,
// where the survivors go on within the timeouts and the cut-off agent fails naming the
// store it lost; an agent killed with kill -9, whose ranks die with it while the other
// host's go on. The coordinator's side alone is agent_liveness_test.cpp.
//
// Ranks run through `sh -c 'echo pid $$; exec braid train ...'`, so the test learns their
// pids. Every agent has a hang guard, and the namespace tests skip, saying why, where
// namespaces cannot be made (not root, no CAP_NET_ADMIN, no iproute2).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/fault_helpers.h"
#include "cli/tiny_mlp.h"
#include "ddp_train_run.h"
#include "fashion_mnist_data.h"
#include "launch/braid_process.h"
#include "temp_dir.h"

namespace {

using braid::testing::HangGuard;
using braid::testing::has_text;
using braid::testing::Process;
using braid::testing::TempDir;
using Clock = std::chrono::steady_clock;

// Sanitizer builds train several times slower (the TSan stage runs these tests too).
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr auto kHangLimit = std::chrono::seconds(400);
#else
constexpr auto kHangLimit = std::chrono::seconds(120);
#endif
constexpr const char* kSecret = "00112233445566778899aabbccddeeff";

// A run long enough to lose a member in on a loaded machine: a millisecond's sleep a step
// keeps its length in the test's hands. 12 x 4 ranks is shared evenly by 4, 3 and 2.
std::string train_args(const TempDir& tmp, int steps) {
  std::string flags = braid::testing::tiny_mlp_flags(tmp);
  flags.replace(flags.find("--batch 16"), 10, "--batch 12");
  return flags + "--optimizer sgd --epochs 100 --slow-step-ms 1 --checkpoint-every 100 " +
         "--max-steps " + std::to_string(steps) + " --out " + tmp.file("run");
}

// `[prefix...] braid launch --nnodes ... LAUNCH_ARGS -- sh -c 'echo pid $$; exec braid train'`.
std::unique_ptr<Process> agent(const std::vector<std::string>& prefix,
                               const std::vector<std::string>& launch_args,
                               const std::string& train, std::map<std::string, std::string> vars) {
  std::vector<std::string> argv = prefix;
  for (const char* a : {BRAID_BINARY, "launch", "--nproc-per-node", "2"}) argv.emplace_back(a);
  argv.insert(argv.end(), launch_args.begin(), launch_args.end());
  for (const char* a : {"--", "sh", "-c"}) argv.emplace_back(a);
  argv.push_back("echo pid $$; exec " + std::string(BRAID_BINARY) + " train " + train);
  vars["BRAID_SECRET"] = kSecret;
  return std::make_unique<Process>(argv, vars);
}

// The pid rank `rank` printed, after waiting for its line; 0 if the output ended first.
pid_t rank_pid(Process& p, int rank) {
  return braid::testing::pid_of(p, "rank " + std::to_string(rank));
}

// Gone, or a zombie nobody reaped yet.
bool dead(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  return close == std::string::npos || close + 2 >= text.size() || text[close + 2] == 'Z' ||
         text[close + 2] == 'X';
}

std::string metrics(const TempDir& tmp) {
  std::ifstream in(tmp.file("run/metrics.jsonl"));
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Two agents on this machine share one endpoint on loopback: the first to bind it hosts the
// store. Which one did, each says in its first line.
struct TwoLocalAgents {
  std::unique_ptr<Process> a, b;
  Process* host = nullptr;    // holds the store and ranks 0, 1
  Process* remote = nullptr;  // ranks 2, 3

  TwoLocalAgents(const std::vector<std::string>& launch_args, const std::string& train) {
    std::vector<std::string> args = {"--rdzv-endpoint",
                                     "127.0.0.1:" + std::to_string(braid::testing::free_port())};
    args.insert(args.end(), launch_args.begin(), launch_args.end());
    a = agent({}, args, train, {});
    b = agent({}, args, train, {});
  }
  // False when an agent ended before saying where it stands.
  bool placed() {
    if (!a->wait_for("this host is node") || !b->wait_for("this host is node")) return false;
    const bool a_hosts = has_text(a->output(), "is hosted here");
    host = a_hosts ? a.get() : b.get();
    remote = a_hosts ? b.get() : a.get();
    return true;
  }
  std::string output() const {
    return "== agent a ==\n" + a->output() + "== agent b ==\n" + b->output();
  }
};

// Two agents, two ranks each; a rank of the agent that does not host the store is killed
// with kill -9. Its agent reports the death at once and restarts it, so the survivors'
// round closes without waiting for the rendezvous timeout (30 s here), the restarted rank
// joins again, and the job finishes with every agent exiting 0; the metrics record both
// membership changes.
TEST(ElasticNodes, TwoAgentsOnOneMachineGoOnWithoutAKilledRankAndFinish) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  TwoLocalAgents job({"--nnodes", "2:2", "--max-restarts", "1", "--rendezvous-timeout", "30"},
                     train_args(tmp, 5000));  // long enough for the restart to join
  HangGuard guard_a(job.a->pid(), kHangLimit), guard_b(job.b->pid(), kHangLimit);
  ASSERT_TRUE(job.placed()) << job.output();
  ASSERT_TRUE(job.host->wait_for("[rank 0] epoch 1/")) << job.output();
  const pid_t victim = rank_pid(*job.remote, 3);
  ASSERT_GT(victim, 0) << job.output();
  braid::testing::let_it_compute(victim, 5);
  const auto killed_at = Clock::now();
  ASSERT_EQ(::kill(victim, SIGKILL), 0) << job.output();
  // The survivors' round closes without the dead rank; on a loaded machine the restarted
  // rank may already be back for it (round 2 of 4 ranks, not 3 then 4).
  ASSERT_TRUE(job.host->wait_for("elastic round 2: ")) << job.output();
  EXPECT_LT(seconds_since(killed_at), 15.0) << "the round waited for the dead rank";
  const bool rejoined_at_once = has_text(job.host->output(), "elastic round 2: 4 ranks");
  EXPECT_EQ(job.host->finish(), 0) << job.output();
  EXPECT_EQ(job.remote->finish(), 0) << job.output();
  ASSERT_FALSE(guard_a.fired() || guard_b.fired()) << "the job hung:\n" << job.output();
  EXPECT_TRUE(has_text(job.remote->output(),
                       "rank 3 was killed by signal 9 (SIGKILL); restarting it (restart 1 of 1 "
                       "on this host)"));
  EXPECT_FALSE(has_text(job.host->output(), "silent past the rendezvous timeout"));
  EXPECT_TRUE(rejoined_at_once || has_text(job.host->output(), "elastic round 3: 4 ranks"));
  EXPECT_TRUE(has_text(job.host->output(), "done: 5000 steps"));
  const std::string records = metrics(tmp);
  EXPECT_TRUE(has_text(records, R"("event":"membership")"));
  if (!rejoined_at_once) {
    EXPECT_TRUE(has_text(records, R"("previous_world":4,)"));
    EXPECT_TRUE(has_text(records, R"("world":3})"));
  }
}

// kill -9 of the agent that does not host the store: its ranks die with it (their parent-
// death signal), its reports stop, and after the rendezvous timeout (2 s) the coordinator
// counts its host lost; the other host's ranks go on and finish (--nnodes 1:2 allows one).
TEST(ElasticNodes, AKilledAgentTakesItsRanksAlongAndTheOtherHostsRanksGoOn) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  TwoLocalAgents job({"--nnodes", "1:2", "--rendezvous-timeout", "2"}, train_args(tmp, 3000));
  HangGuard guard_a(job.a->pid(), kHangLimit), guard_b(job.b->pid(), kHangLimit);
  ASSERT_TRUE(job.placed()) << job.output();
  ASSERT_TRUE(job.host->wait_for("[rank 0] epoch 1/")) << job.output();
  const pid_t r2 = rank_pid(*job.remote, 2), r3 = rank_pid(*job.remote, 3);
  ASSERT_GT(r2, 0) << job.output();
  ASSERT_GT(r3, 0) << job.output();
  ASSERT_EQ(::kill(job.remote->pid(), SIGKILL), 0);
  EXPECT_EQ(job.remote->finish(), 128 + SIGKILL);
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (!(dead(r2) && dead(r3)) && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(dead(r2) && dead(r3)) << "the killed agent's ranks outlived it";
  EXPECT_EQ(job.host->finish(), 0) << job.output();
  ASSERT_FALSE(guard_a.fired() || guard_b.fired()) << "the job hung:\n" << job.output();
  EXPECT_TRUE(has_text(job.host->output(), "node 1 is lost: no report from its agent for 2."));
  EXPECT_TRUE(has_text(job.host->output(), "elastic round 2: 2 ranks")) << job.output();
  EXPECT_TRUE(has_text(job.host->output(), "done: 3000 steps")) << job.output();
  EXPECT_TRUE(has_text(metrics(tmp), R"("world":2})"));
}

struct Result {
  int code;
  std::string output;
};

Result sh(const std::string& cmd) {
  FILE* pipe = ::popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// Hosts in network namespaces of this test's own (BRAID_NETNS_PREFIX), always torn down.
class ElasticNodesNetns : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "skipped: network namespaces need root";
    prefix_ = "bn" + std::to_string(::getpid() % 100000);
    script_ =
        "BRAID_NETNS_PREFIX=" + prefix_ + " " + BRAID_SOURCE_DIR + "/scripts/netns-cluster.sh";
    const Result probe =
        sh("ip netns add " + prefix_ + "probe && ip netns del " + prefix_ + "probe");
    if (probe.code != 0) {
      prefix_.clear();
      GTEST_SKIP() << "skipped: cannot create network namespaces here: " << probe.output;
    }
  }
  void TearDown() override {
    if (!prefix_.empty()) sh(script_ + " down");
  }
  // An agent inside host `host`'s namespace.
  std::unique_ptr<Process> agent_on(int host, const std::vector<std::string>& launch_args,
                                    const std::string& train) {
    return agent({BRAID_SOURCE_DIR "/scripts/netns-cluster.sh", "exec", std::to_string(host)},
                 launch_args, train, {{"BRAID_NETNS_PREFIX", prefix_}});
  }
  std::string prefix_, script_;
};

// Host 1's link is cut mid-run. Its agent cannot reach the store (on host 0) and gives up
// after the rendezvous timeout (2 s), killing its ranks and naming the store; the survivors
// on host 0 time out in their collective (--timeout 3: a cut link sends no reset), and their
// new round closes at once, since node 1 was already counted lost, not after a rendezvous
// timeout of its own. They finish the run.
TEST_F(ElasticNodesNetns, ALinkCutBetweenTwoHostsIsDetectedAndTheSurvivorsGoOn) {
  REQUIRE_FASHION_MNIST();
  ASSERT_EQ(sh(script_ + " up 2").code, 0);
  const TempDir tmp;
  const std::vector<std::string> args = {"--nnodes",
                                         "1:2",
                                         "--rdzv-endpoint",
                                         "10.77.0.1:29400",
                                         "--transport",
                                         "tcp",
                                         "--timeout",
                                         "3",
                                         "--rendezvous-timeout",
                                         "2"};
  auto host0 = agent_on(0, args, train_args(tmp, 3000));
  auto host1 = agent_on(1, args, train_args(tmp, 3000));
  HangGuard guard0(host0->pid(), kHangLimit), guard1(host1->pid(), kHangLimit);
  auto output = [&] {
    return "== host 0 ==\n" + host0->output() + "== host 1 ==\n" + host1->output();
  };
  ASSERT_TRUE(host1->wait_for("this host is node 1 of 2")) << output();
  ASSERT_TRUE(host0->wait_for("[rank 0] epoch 1/")) << output();
  const Result cut = sh(script_ + " cut 1");
  ASSERT_EQ(cut.code, 0) << cut.output;
  const auto cut_at = Clock::now();

  EXPECT_EQ(host1->finish(), 1) << output();
  EXPECT_LT(seconds_since(cut_at), 2 + 5.0) << "the cut-off agent did not give up in time";
  EXPECT_TRUE(
      has_text(host1->output(), "the job's store at 10.77.0.1:29400 was unreachable for 2."));
  EXPECT_TRUE(has_text(host1->output(), "killed this host's ranks"));

  ASSERT_TRUE(host0->wait_for("elastic round 2: 2 ranks")) << output();
  EXPECT_LT(seconds_since(cut_at), 3 + 2 + 5.0) << "the survivors did not go on in time";
  EXPECT_EQ(host0->finish(), 0) << output();
  ASSERT_FALSE(guard0.fired() || guard1.fired()) << "the job hung:\n" << output();
  EXPECT_TRUE(has_text(host0->output(), "node 1 is lost: no report from its agent for 2."));
  EXPECT_FALSE(has_text(host0->output(), "silent past the rendezvous timeout"));
  EXPECT_TRUE(has_text(host0->output(), "done: 3000 steps"));
  EXPECT_TRUE(has_text(metrics(tmp), R"("world":2})"));
}

}  // namespace
