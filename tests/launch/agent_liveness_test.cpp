// The coordinator of a multi-host elastic job with remote members (launch/elastic_agent.h,
// launch/agent_liveness.h, launch/agent_heartbeat.h), as membership_test does it: members
// and agents as threads over one MemoryStore. The coordinator is the real ElasticAgent of
// node 0 (its own members' liveness as the test says); node 1 is a real AgentHeartbeat over
// a store the test can cut off. A silent agent's members are left out long before the
// rendezvous timeout; a death its agent reported closes the round at once.
#include "launch/agent_liveness.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>

#include "comm/memory_store.h"
#include "core/error.h"
#include "launch/agent_heartbeat.h"
#include "launch/elastic_agent.h"

namespace braid::launch {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kWait = 30s;  // never reached unless the protocol is broken

// A store whose link the test can cut: every call then fails as a cut link's would.
class CuttableStore : public comm::Store {
 public:
  explicit CuttableStore(std::shared_ptr<comm::Store> base) : base_(std::move(base)) {}
  std::atomic<bool> cut{false};

  using Store::get;
  using Store::set;
  void set(const std::string& key, std::span<const uint8_t> value) override {
    check();
    base_->set(key, value);
  }
  comm::Bytes get(const std::string& key, comm::Deadline deadline) override {
    check();
    return base_->get(key, deadline);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    check();
    return base_->add(key, delta);
  }
  comm::Bytes compare_set(const std::string& key, std::span<const uint8_t> expected,
                          std::span<const uint8_t> desired) override {
    check();
    return base_->compare_set(key, expected, desired);
  }
  void wait(std::span<const std::string> keys, comm::Deadline deadline) override {
    check();
    base_->wait(keys, deadline);
  }
  bool remove(const std::string& key) override {
    check();
    return base_->remove(key);
  }

 private:
  void check() const {
    if (cut) BRAID_THROW(IoError, "store at 10.77.0.1:29400: Network is unreachable");
  }
  std::shared_ptr<comm::Store> base_;
};

// Node 0's agent, hosting the coordinator, ticked on its own thread as braid launch's
// supervision loop ticks it; its two members are alive unless the test says otherwise.
class Coordinator {
 public:
  Coordinator(std::shared_ptr<comm::Store> store, ElasticOptions options, int min_nodes = 1)
      : agent_(options, place(min_nodes), std::move(store), nullptr, "10.77.0.1:29400"),
        thread_([this] { loop(); }) {}
  ~Coordinator() {
    stop_ = true;
    thread_.join();
  }

  // Once a line holding `text` was said, all lines so far; else what there is after kWait.
  std::string wait_for_line(const std::string& text) {
    const auto until = Clock::now() + kWait;
    while (Clock::now() < until) {
      {
        std::lock_guard lock(mutex_);
        if (lines_.find(text) != std::string::npos) return lines_;
      }
      std::this_thread::sleep_for(1ms);
    }
    std::lock_guard lock(mutex_);
    return lines_;
  }

 private:
  static AgentPlace place(int min_nodes) {
    AgentPlace p;
    p.node = 0;
    p.world = 4;
    p.local_ranks = 2;
    p.node_ranks = {2, 2};
    p.min_nodes = min_nodes;
    p.nodes_flag = "--nnodes " + std::to_string(min_nodes) + ":2";
    return p;
  }
  void loop() {
    while (!stop_) {
      const AgentActions a = agent_.tick({"0.0.0", "0.1.0"}, {}, [](const std::string& m) {
        return m.rfind("0.", 0) == 0 ? comm::Liveness::alive : comm::Liveness::unknown;
      });
      {
        std::lock_guard lock(mutex_);
        for (const std::string& l : a.lines) lines_ += l + "\n";
      }
      std::this_thread::sleep_for(1ms);
    }
  }

  ElasticAgent agent_;
  std::mutex mutex_;
  std::string lines_;
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last: starts once the rest is built
};

std::future<comm::Round> ask(comm::Store& store, std::string member, int64_t round, int64_t step) {
  return std::async(std::launch::async, [&store, member, round, step] {
    return comm::join_round(store, member, round, step, comm::Deadline::after(kWait));
  });
}

// Node 1's agent: a real heartbeat over a store the test can cut.
struct RemoteAgent {
  explicit RemoteAgent(const std::shared_ptr<comm::Store>& store)
      : link(std::make_shared<CuttableStore>(store)),
        heartbeat(
            [l = link]() -> std::shared_ptr<comm::Store> {
              if (l->cut)
                BRAID_THROW(IoError, "connect to 10.77.0.1:29400: Network is unreachable");
              return l;
            },
            1, 20ms) {
    heartbeat.set_members({"1.0.0", "1.1.0"}, {});
  }
  std::shared_ptr<CuttableStore> link;
  AgentHeartbeat heartbeat;
};

ElasticOptions options(std::chrono::milliseconds rendezvous_timeout) {
  ElasticOptions o;
  o.min_ranks = 1;
  o.rendezvous_timeout = rendezvous_timeout;
  return o;
}

// Round 1 of all four members.
void first_round(comm::Store& store) {
  std::vector<std::future<comm::Round>> all;
  for (const char* m : {"0.0.0", "0.1.0", "1.0.0", "1.1.0"}) all.push_back(ask(store, m, 0, -1));
  for (auto& f : all) ASSERT_EQ(f.get().world(), 4);
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

TEST(AgentLiveness, ReportsReadBackAsWritten) {
  AgentReport r;
  r.beat = 42;
  r.done = true;
  r.live = {"1.0.0", "1.1.2"};
  r.gone = {"1.1.0", "1.1.1"};
  const AgentReport back = parse_agent_report(format_agent_report(r));
  EXPECT_EQ(back.beat, 42);
  EXPECT_TRUE(back.done);
  EXPECT_EQ(back.live, r.live);
  EXPECT_EQ(back.gone, r.gone);
  EXPECT_TRUE(parse_agent_report(format_agent_report(AgentReport{})).live.empty());
  EXPECT_THROW(parse_agent_report("beet 1\nlive\ngone"), Error);
  EXPECT_THROW(parse_agent_report("beat 1 finished\nlive\ngone"), Error);
  EXPECT_EQ(node_of_member("12.3.4"), "12");
  EXPECT_EQ(node_of_member("3.4"), "");  // a single-host launch's member
  EXPECT_EQ(node_of_member("guest-77-ab12.0.1"), "");
}

TEST(AgentLiveness, AnAgentSilentPastTheLimitIsLostAndItsMembersAreGone) {
  AgentLiveness liveness(100ms);
  const auto t0 = Clock::now();
  liveness.expect(1, t0);
  liveness.observe(1, AgentReport{1, false, {"1.0.0"}, {"1.1.0"}}, t0);
  EXPECT_EQ(liveness.of("1.0.0"), comm::Liveness::alive);
  EXPECT_EQ(liveness.of("1.1.0"), comm::Liveness::gone);
  EXPECT_EQ(liveness.of("1.2.0"), comm::Liveness::unknown);  // not reported yet
  EXPECT_EQ(liveness.of("0.0.0"), comm::Liveness::unknown);  // not a remote agent's
  // The same beat again is no sign of life.
  liveness.observe(1, AgentReport{1, false, {"1.0.0"}, {}}, t0 + 90ms);
  EXPECT_TRUE(liveness.newly_lost(t0 + 99ms).empty());
  const auto lost = liveness.newly_lost(t0 + 100ms);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].first, 1);
  EXPECT_NE(lost[0].second.find("no report from its agent for 0.1 s"), std::string::npos);
  EXPECT_EQ(liveness.of("1.0.0"), comm::Liveness::gone);
  EXPECT_TRUE(liveness.newly_lost(t0 + 200ms).empty());  // named once
  // Lost for good: a late beat changes nothing.
  liveness.observe(1, AgentReport{2, false, {"1.0.0"}, {}}, t0 + 300ms);
  EXPECT_EQ(liveness.of("1.0.0"), comm::Liveness::gone);
  EXPECT_TRUE(liveness.all_ended());
}

// Node 1's link is cut after round 1, and node 0's members ask for round 2 a while later,
// as survivors do once their collectives time out. Node 1's members are gone once its
// reports are older than the silence limit (the rendezvous timeout, 1 s, counted from the
// cut), so the round closes then, without waiting its own rendezvous timeout for them
// (counted from the first ask, it would end 0.7 s later, naming them silent). The cut-off
// heartbeat sees the store unreachable.
TEST(AgentLiveness, ACutOffAgentsMembersAreLeftOutWhenItsReportsGoStale) {
  auto store = std::make_shared<comm::MemoryStore>();
  Coordinator coordinator(store, options(1s));
  RemoteAgent remote(store);
  first_round(*store);
  remote.link->cut = true;
  const auto cut_at = Clock::now();
  std::this_thread::sleep_for(700ms);
  auto a = ask(*store, "0.0.0", 2, 10), b = ask(*store, "0.1.0", 2, 10);
  const comm::Round r = a.get();
  EXPECT_EQ(r.members, (std::vector<std::string>{"0.0.0", "0.1.0"}));
  EXPECT_LT(seconds_since(cut_at), 1.6);
  b.get();
  const std::string lines = coordinator.wait_for_line("elastic round 2");
  EXPECT_NE(lines.find("node 1 is lost: no report from its agent for 1."), std::string::npos)
      << lines;
  EXPECT_NE(lines.find("elastic round 2: 2 ranks\n"), std::string::npos) << lines;
  EXPECT_GE(remote.heartbeat.unreachable_for(Clock::now()), 900ms);
  EXPECT_NE(remote.heartbeat.last_error().find("Network is unreachable"), std::string::npos);
  // When the link comes back, the agent learns it was counted lost.
  remote.link->cut = false;
  const auto until = Clock::now() + kWait;
  while (remote.heartbeat.lost_reason().empty() && Clock::now() < until)
    std::this_thread::sleep_for(5ms);
  EXPECT_NE(remote.heartbeat.lost_reason().find("no report from its agent"), std::string::npos);
}

// The silence limit and the rendezvous timeout are 30 s: only the report can close the
// round at once.
TEST(AgentLiveness, ADeathItsAgentReportedClosesTheRoundAtOnce) {
  auto store = std::make_shared<comm::MemoryStore>();
  Coordinator coordinator(store, options(30s));
  RemoteAgent remote(store);
  first_round(*store);
  const auto died_at = Clock::now();
  remote.heartbeat.set_members({"1.0.0"}, {"1.1.0"});
  auto a = ask(*store, "0.0.0", 2, 10), b = ask(*store, "0.1.0", 2, 10),
       c = ask(*store, "1.0.0", 2, 10);
  EXPECT_EQ(a.get().members, (std::vector<std::string>{"0.0.0", "0.1.0", "1.0.0"}));
  EXPECT_LT(seconds_since(died_at), 2.0);
  b.get();
  c.get();
  EXPECT_EQ(coordinator.wait_for_line("round 2").find("silent"), std::string::npos);
}

// A remote member alive (its agent beats, it is listed live) that does not ask is waited
// for, then left out after the rendezvous timeout, and its agent is ordered to kill it.
TEST(AgentLiveness, ASilentRemoteMemberIsLeftOutAfterTheRendezvousTimeoutAndKilled) {
  auto store = std::make_shared<comm::MemoryStore>();
  Coordinator coordinator(store, options(1500ms));
  RemoteAgent remote(store);
  first_round(*store);
  const auto asked_at = Clock::now();
  auto a = ask(*store, "0.0.0", 2, 10), b = ask(*store, "0.1.0", 2, 10),
       c = ask(*store, "1.0.0", 2, 10);
  EXPECT_EQ(a.get().world(), 3);
  EXPECT_GE(seconds_since(asked_at), 1.4);  // it waited: the agent beats and lists 1.1.0
  b.get();
  c.get();
  EXPECT_NE(coordinator.wait_for_line("round 2").find("1 silent past the rendezvous timeout"),
            std::string::npos);
  std::vector<std::string> kills;
  const auto until = Clock::now() + kWait;
  while (kills.empty() && Clock::now() < until) {
    kills = remote.heartbeat.take_kill_orders();
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(kills, (std::vector<std::string>{"1.1.0"}));
}

TEST(AgentLiveness, FewerNodesLeftThanTheMinimumFailTheRoundNamingWhy) {
  auto store = std::make_shared<comm::MemoryStore>();
  Coordinator coordinator(store, options(500ms), /*min_nodes=*/2);
  RemoteAgent remote(store);
  first_round(*store);
  remote.link->cut = true;
  try {
    ask(*store, "0.0.0", 2, 10).get();
    FAIL() << "a round on one node formed under --nnodes 2:2";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "members on 1 node(s) left, fewer than the 2 the job needs (--nnodes 2:2)"),
              std::string::npos)
        << e.what();
  }
}

// An agent that finished says so at once: its members are gone and the agent hosting the
// store may exit.
TEST(AgentLiveness, AFinishedAgentSaysSoInItsLastReport) {
  auto store = std::make_shared<comm::MemoryStore>();
  RemoteAgent remote(store);
  remote.heartbeat.set_members({}, {"1.0.0", "1.1.0"});
  EXPECT_TRUE(remote.heartbeat.finish(5s));
  const AgentReport r = parse_agent_report(comm::read_now(*store, agent_report_key(1)));
  EXPECT_TRUE(r.done);
  EXPECT_EQ(r.gone, (std::vector<std::string>{"1.0.0", "1.1.0"}));
  AgentLiveness liveness(10s);
  liveness.expect(1, Clock::now());
  liveness.read_reports(*store, Clock::now());
  EXPECT_TRUE(liveness.all_ended());
  EXPECT_TRUE(liveness.any_done());
}

}  // namespace
}  // namespace braid::launch
