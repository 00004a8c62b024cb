// Elastic membership rounds (comm/membership.h): members ask, the coordinator closes rounds,
// with processes as threads over one MemoryStore and liveness as the test says.
#include "comm/membership.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "comm/memory_store.h"
#include "core/error.h"

namespace braid::comm {
namespace {

using namespace std::chrono_literals;

constexpr auto kWait = 30s;  // never reached unless the protocol is broken

// Polls a coordinator on its own thread, as braid launch's supervision loop does, with the
// liveness the test sets; keeps every round it closed.
class CoordinatorThread {
 public:
  CoordinatorThread(std::shared_ptr<Store> store, RoundRules rules,
                    std::vector<std::string> initial)
      : coordinator_(std::move(store), rules, std::move(initial)), thread_([this] { loop(); }) {}
  ~CoordinatorThread() {
    stop_ = true;
    thread_.join();
  }
  void set_gone(const std::string& member) {
    std::lock_guard lock(mutex_);
    gone_[member] = true;
  }
  // Processes the launcher restarted that have not asked yet (RoundCoordinator::poll).
  void set_arriving(std::vector<std::string> members) {
    std::lock_guard lock(mutex_);
    arriving_ = std::move(members);
  }
  // The rounds closed, once there are `count` (a member hears of a round as the coordinator
  // writes it, a moment before this thread records it).
  std::vector<ClosedRound> closed(size_t count) {
    const auto until = std::chrono::steady_clock::now() + kWait;
    while (std::chrono::steady_clock::now() < until) {
      {
        std::lock_guard lock(mutex_);
        if (closed_.size() >= count) return closed_;
      }
      std::this_thread::sleep_for(1ms);
    }
    std::lock_guard lock(mutex_);
    return closed_;
  }

 private:
  void loop() {
    while (!stop_) {
      std::vector<std::string> arriving;
      {
        std::lock_guard lock(mutex_);
        arriving = arriving_;
      }
      std::optional<ClosedRound> c = coordinator_.poll(
          [&](const std::string& m) {
            std::lock_guard lock(mutex_);
            return gone_.count(m) ? Liveness::gone : Liveness::alive;
          },
          arriving);
      if (c) {
        std::lock_guard lock(mutex_);
        closed_.push_back(*c);
      }
      std::this_thread::sleep_for(1ms);
    }
  }

  RoundCoordinator coordinator_;
  std::mutex mutex_;
  std::map<std::string, bool> gone_;
  std::vector<std::string> arriving_;
  std::vector<ClosedRound> closed_;
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last: starts once the rest is built
};

std::future<Round> ask(Store& store, std::string member, int64_t round, int64_t step) {
  return std::async(std::launch::async, [&store, member, round, step] {
    return join_round(store, member, round, step, Deadline::after(kWait));
  });
}

TEST(Membership, TheFirstRoundHoldsTheLaunchedMembersInTheirOrder) {
  auto store = std::make_shared<MemoryStore>();
  CoordinatorThread coordinator(store, {}, {"0.0", "1.0", "2.0"});
  // They ask in another order than their slots'.
  auto c = ask(*store, "2.0", 0, kNoCommit);
  auto a = ask(*store, "0.0", 0, kNoCommit);
  auto b = ask(*store, "1.0", 0, kNoCommit);
  const Round ra = a.get(), rb = b.get(), rc = c.get();
  EXPECT_EQ(ra.number, 1);
  EXPECT_EQ(ra.members, (std::vector<std::string>{"0.0", "1.0", "2.0"}));
  EXPECT_EQ(ra.rank, 0);
  EXPECT_EQ(rb.rank, 1);
  EXPECT_EQ(rc.rank, 2);
  EXPECT_EQ(ra.source_step, kNoCommit);
  EXPECT_EQ(rc.members, ra.members);
}

TEST(Membership, SurvivorsCloseTheNextRoundAloneAndTheNewestCommitIsTheSource) {
  auto store = std::make_shared<MemoryStore>();
  CoordinatorThread coordinator(store, {}, {"a", "b", "c"});
  {
    auto a = ask(*store, "a", 0, kNoCommit), b = ask(*store, "b", 0, kNoCommit),
         c = ask(*store, "c", 0, kNoCommit);
    ASSERT_EQ(a.get().number, 1);
    b.get();
    c.get();
  }
  // c dies; a committed step 10, b finished step 11 before the failure reached it.
  coordinator.set_gone("c");
  auto b = ask(*store, "b", 2, 11);
  auto a = ask(*store, "a", 2, 10);
  const Round ra = a.get(), rb = b.get();
  EXPECT_EQ(ra.number, 2);
  EXPECT_EQ(ra.members, (std::vector<std::string>{"a", "b"}));  // the old order, not the asking
  EXPECT_EQ(ra.rank, 0);
  EXPECT_EQ(rb.rank, 1);
  EXPECT_EQ(ra.source, 1);
  EXPECT_EQ(ra.source_step, 11);
}

TEST(Membership, ANewcomerSetsPendingAndJoinsWhenTheMembersRegroup) {
  auto store = std::make_shared<MemoryStore>();
  CoordinatorThread coordinator(store, {}, {"a", "b"});
  {
    auto a = ask(*store, "a", 0, kNoCommit), b = ask(*store, "b", 0, kNoCommit);
    a.get();
    b.get();
  }
  EXPECT_EQ(pending_round(*store), 0);
  auto d = ask(*store, "d", 0, kNoCommit);  // asks for the next round by itself
  const auto until = std::chrono::steady_clock::now() + kWait;
  while (pending_round(*store) == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  ASSERT_EQ(pending_round(*store), 2);
  // The members see it at a commit and regroup at step 5.
  auto a = ask(*store, "a", 2, 5), b = ask(*store, "b", 2, 5);
  const Round rd = d.get();
  EXPECT_EQ(rd.members, (std::vector<std::string>{"a", "b", "d"}));
  EXPECT_EQ(rd.rank, 2);
  EXPECT_EQ(rd.source, 0);
  EXPECT_EQ(rd.source_step, 5);
  a.get();
  b.get();
}

TEST(Membership, ASilentMemberIsLeftOutAfterTheRendezvousTimeout) {
  auto store = std::make_shared<MemoryStore>();
  RoundRules rules;
  rules.rendezvous_timeout = 200ms;
  CoordinatorThread coordinator(store, rules, {"a", "b"});
  // b is alive (stopped, say) and never asks.
  const Round r = ask(*store, "a", 0, kNoCommit).get();
  EXPECT_EQ(r.members, (std::vector<std::string>{"a"}));
  const std::vector<ClosedRound> closed = coordinator.closed(1);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].left_out, (std::vector<std::string>{"b"}));
}

TEST(Membership, TooFewMembersFailTheRoundWithTheReason) {
  auto store = std::make_shared<MemoryStore>();
  RoundRules rules;
  rules.min_members = 2;
  CoordinatorThread coordinator(store, rules, {"a", "b"});
  coordinator.set_gone("b");
  try {
    ask(*store, "a", 0, kNoCommit).get();
    FAIL() << "a round of 1 member formed under min_members 2";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fewer than the 2"), std::string::npos) << e.what();
  }
}

// A job that needs every rank (min_members = its size, as a pipeline's): a lost member's
// restart is on its way, so the round waits for it instead of failing, and closes whole.
TEST(Membership, ARoundShortOfMembersWaitsForARestartOnItsWay) {
  auto store = std::make_shared<MemoryStore>();
  RoundRules rules;
  rules.min_members = 2;
  CoordinatorThread coordinator(store, rules, {"a", "b"});
  auto a1 = ask(*store, "a", 0, kNoCommit), b1 = ask(*store, "b", 0, kNoCommit);
  a1.get();  // round 1: a and b
  b1.get();
  coordinator.set_gone("b");
  coordinator.set_arriving({"b.1"});
  auto a = ask(*store, "a", 2, 10);
  EXPECT_EQ(a.wait_for(200ms), std::future_status::timeout) << "round 2 closed short of b.1";
  const Round r = ask(*store, "b.1", 2, kNoCommit).get();
  EXPECT_EQ(r.members, (std::vector<std::string>{"a", "b.1"}));
  EXPECT_EQ(a.get().members, r.members);
}

TEST(Membership, AMemberPastMaxMembersWaitsForTheNextRound) {
  auto store = std::make_shared<MemoryStore>();
  RoundRules rules;
  rules.max_members = 2;
  CoordinatorThread coordinator(store, rules, {"a", "b"});
  auto x = ask(*store, "x", 0, kNoCommit);  // a guest, first to ask
  auto a = ask(*store, "a", 0, kNoCommit), b = ask(*store, "b", 0, kNoCommit);
  const Round ra = a.get();
  EXPECT_EQ(ra.members, (std::vector<std::string>{"a", "b"}));
  b.get();
  // x now waits for round 2, as a spare: the full job is not asked to regroup for it.
  EXPECT_EQ(x.wait_for(100ms), std::future_status::timeout);
  EXPECT_EQ(pending_round(*store), 0);
  mark_finished(*store, 7);
  EXPECT_TRUE(x.get().finished);
}

// A spare waiting beside a full job takes the place of a member lost later: the round the
// survivors ask for closes with it (a pipeline's mesh is whole again at once).
TEST(Membership, ASpareTakesTheLostMembersPlaceInTheNextRound) {
  auto store = std::make_shared<MemoryStore>();
  RoundRules rules;
  rules.min_members = rules.max_members = 2;
  CoordinatorThread coordinator(store, rules, {"a", "b"});
  auto a1 = ask(*store, "a", 0, kNoCommit), b1 = ask(*store, "b", 0, kNoCommit);
  a1.get();
  b1.get();
  auto spare = ask(*store, "s", 0, kNoCommit);
  EXPECT_EQ(spare.wait_for(100ms), std::future_status::timeout);
  EXPECT_EQ(pending_round(*store), 0);
  coordinator.set_gone("b");
  const Round r = ask(*store, "a", 2, 10).get();
  EXPECT_EQ(r.members, (std::vector<std::string>{"a", "s"}));
  EXPECT_EQ(spare.get().members, r.members);
}

TEST(Membership, AProcessAskingAfterTheJobFinishedIsToldSo) {
  auto store = std::make_shared<MemoryStore>();
  CoordinatorThread coordinator(store, {}, {"a"});
  ask(*store, "a", 0, kNoCommit).get();
  mark_finished(*store, 100);
  const Round late = ask(*store, "a.1", 0, kNoCommit).get();
  EXPECT_TRUE(late.finished);
  EXPECT_EQ(late.rank, -1);
}

}  // namespace
}  // namespace braid::comm
