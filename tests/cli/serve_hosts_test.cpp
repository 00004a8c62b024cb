// A job placed on two `braid worker`s: the server chooses its rendezvous (a port on its first
// worker) and secret, each worker runs one `braid launch --nnodes` agent, and the job ends
// once both hosts have. The second worker runs in a network namespace of its own where this
// machine allows one (root, iproute2: scripts/netns-cluster.sh), with the server and the first
// worker in another, so the ranks meet over a real network; elsewhere all run on this host.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "fashion_mnist_data.h"
#include "serve_harness.h"

namespace {

using braid::testing::run_braid;
using braid::testing::TempDir;
using namespace braid::testing::serve;

// `sh -c CMD`: its exit status and output.
braid::testing::BraidResult sh(const std::string& cmd) {
  FILE* pipe = ::popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  while (const size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// Two "hosts" in network namespaces of this test's own, or none where they cannot be made.
class Hosts {
 public:
  Hosts() : prefix_("bs" + std::to_string(::getpid() % 100000)) {
    script_ = std::string(BRAID_SOURCE_DIR) + "/scripts/netns-cluster.sh";
    if (::geteuid() != 0) {
      why_not_ = "not root";
      return;
    }
    // The namespaces' names, for this script here and in every child that execs into one.
    ::setenv("BRAID_NETNS_PREFIX", prefix_.c_str(), 1);
    const auto up = sh(script_ + " up 2");
    if (up.code != 0) {
      why_not_ = up.output;
      sh(script_ + " down");
      return;
    }
    up_ = true;
  }
  ~Hosts() {
    if (up_) sh(script_ + " down");
  }
  Hosts(const Hosts&) = delete;
  Hosts& operator=(const Hosts&) = delete;

  bool up() const { return up_; }
  const std::string& why_not() const { return why_not_; }
  // The command line before braid to run it on host `i` (nothing without namespaces).
  std::vector<std::string> on(int i) const {
    if (!up_) return {};
    return {script_, "exec", std::to_string(i)};
  }
  std::string address(int i) const {
    return up_ ? "10.77.0." + std::to_string(i + 1) : "127.0.0.1";
  }

 private:
  std::string prefix_, script_, why_not_;
  bool up_ = false;
};

TEST(ServeHosts, AJobOnTwoWorkersRunsAsOneJobAndAsTheSameRunByHand) {
  REQUIRE_FASHION_MNIST();
  const Hosts hosts;
  if (!hosts.up())
    std::printf("no network namespaces here (%s): both workers on this host\n",
                hosts.why_not().c_str());
  const TempDir tmp;
  // A port range of this test's own: tests running at once on this machine do not share one.
  const int first_port = 31000 + static_cast<int>(::getpid() % 2000) * 10;
  ServerOptions options;
  options.host = hosts.address(0);
  options.prefix = hosts.on(0);
  options.extra = {"--rdzv-ports",
                   std::to_string(first_port) + "-" + std::to_string(first_port + 9)};
  const Server server(tmp, tmp.file("data"), options);
  ASSERT_GT(server.port, 0) << server.process.output();
  const auto a = server.worker(tmp, 1, "a", "host-a", hosts.on(0));
  const auto b = server.worker(tmp, 1, "b", "host-b", hosts.on(1));
  ASSERT_TRUE(a->wait_for("braid worker") && b->wait_for("braid worker"))
      << a->output() << b->output();
  const json config = {{"model", "mlp"},   {"max_steps", 30}, {"log_every", 10},
                       {"eval_every", 15}, {"threads", 1},    {"seed", 3}};
  const std::string file = job_config(tmp, "job.json", config);
  const auto submit = server.braid("submit " + file + " -n 2", server.admin);
  ASSERT_EQ(submit.code, 0) << submit.output;
  const int64_t id = submitted_id(submit.output);
  const json job = server.wait_final(id, server.admin);
  ASSERT_EQ(job.value("state", ""), "succeeded") << job.dump() << "\n== a ==\n"
                                                 << a->output() << "\n== b ==\n"
                                                 << b->output();

  // One rank on each worker, meeting at a port of the range on the first.
  ASSERT_EQ(job.at("placement").size(), 2u) << job.dump();
  EXPECT_EQ(job["placement"][0].value("ranks", 0), 1);
  EXPECT_EQ(job["placement"][1].value("ranks", 0), 1);
  // The first worker's address: where the server saw it call from.
  const int64_t first = job["placement"][0].value("worker", int64_t{0});
  const bool a_first =
      a->output().find("braid worker " + std::to_string(first) + " (host-a") != std::string::npos;
  const std::string first_address = hosts.address(a_first ? 0 : 1);
  EXPECT_EQ(job.value("rendezvous", "").rfind(first_address + ":", 0), 0u) << job.dump();
  const int port = std::stoi(job.value("rendezvous", "x:0").substr(first_address.size() + 1));
  EXPECT_TRUE(port >= first_port && port <= first_port + 9) << port;
  EXPECT_EQ(job.at("hosts_started").size(), 2u) << job.dump();
  EXPECT_EQ(job.at("hosts_finished").size(), 2u) << job.dump();
  // Both ranks' events and output lines reached the server, each from its own worker.
  ASSERT_EQ(job.at("health").size(), 2u);
  for (const json& h : job.at("health")) {
    EXPECT_EQ(h.value("last_event", ""), "stopped") << h.dump();
    EXPECT_EQ(h.value("step", 0), 30) << h.dump();
  }
  const auto logs = server.braid("logs " + std::to_string(id), server.admin);
  EXPECT_NE(logs.output.find("[rank 0] done: 30 steps"), std::string::npos) << logs.output;
  EXPECT_NE(logs.output.find("this host is node 1 of 2"), std::string::npos) << logs.output;

  // The same job by hand, two ranks on this host: the same final evaluation, to the bit.
  const auto by_hand = run_braid("launch -n 2 -- " + std::string(BRAID_BINARY) +
                                 " train --config " + file + " --out " + tmp.file("by-hand"));
  ASSERT_EQ(by_hand.code, 0) << by_hand.output;
  const std::string served =
      read_file(tmp.file("data/files/" + std::to_string(id) + "/metrics.jsonl"));
  ASSERT_FALSE(served.empty()) << "no metrics.jsonl reached the server";
  const std::string metrics = read_file(tmp.file("by-hand/metrics.jsonl"));
  EXPECT_EQ(last_eval(served).value("loss", -1.0), last_eval(metrics).value("loss", -2.0));
  EXPECT_EQ(last_eval(served).value("accuracy", -1.0), last_eval(metrics).value("accuracy", -2.0));
}

}  // namespace
