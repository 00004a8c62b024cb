// run_wait and run_test (comm/wait_loop.h), the loop every transport's wait() and test()
// share, over scripted steps: requests are released exactly once on success and failed
// exactly once on an error (inside its handler), the deadline ends a wait even while
// progress keeps moving, idle() is asked only after passes that moved nothing and never
// to sleep past the deadline, stalls are reported with the steps' description, and
// recheck() sends the loop round again. The transports' own behaviour is in
// transport_contract_test.cpp.
#include "comm/wait_loop.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "comm/transport.h"
#include "core/error.h"
#include "log_capture.h"

namespace braid::comm {
namespace {

using namespace std::chrono_literals;

struct ScriptedSteps final : WaitSteps {
  // Called with the pass number (from 1); defaults: nothing moves, never done.
  std::function<bool(int)> moves = [](int) { return false; };
  std::function<bool(int)> finished = [](int) { return false; };
  std::function<bool(int)> rechecks = [](int) { return false; };

  int passes = 0, dones = 0, idles = 0, releases = 0, fails = 0, timeouts = 0;
  std::vector<Clock::duration> idle_for;
  std::vector<Clock::time_point> wakes;
  std::string failed_with;
  Deadline deadline = Deadline::never();

  bool progress() override { return moves(++passes); }
  bool done() override {
    ++dones;
    return finished(passes);
  }
  bool recheck(Clock::time_point) override { return rechecks(passes); }
  std::string pending() override { return "a receive of 8 bytes from rank 1 (scripted)"; }
  [[noreturn]] void timeout() override {
    ++timeouts;
    BRAID_THROW(TimeoutError, "scripted timeout after ", passes, " passes");
  }
  void idle(Clock::time_point, Clock::duration d, Clock::time_point wake) override {
    ++idles;
    idle_for.push_back(d);
    wakes.push_back(wake);
  }
  void release() override { ++releases; }
  void fail() override {
    ++fails;
    try {
      throw;  // the exception that ended the wait is the one being handled
    } catch (const std::exception& e) {
      failed_with = e.what();
    }
  }
};

TEST(WaitLoop, ReturnsWhenDoneAndReleasesOnce) {
  ScriptedSteps s;
  s.moves = [](int pass) { return pass % 2 == 0; };
  s.finished = [](int pass) { return pass == 5; };
  run_wait(s, 0, Deadline::after(60s));
  EXPECT_EQ(s.passes, 5);
  EXPECT_EQ(s.releases, 1);
  EXPECT_EQ(s.fails, 0);
  // Passes 1 and 3 moved nothing; 2 and 4 moved, so they go round at once.
  EXPECT_EQ(s.idles, 2);
}

TEST(WaitLoop, AnErrorFailsTheRequestsInsideItsHandlerAndPropagates) {
  ScriptedSteps s;
  s.finished = [](int pass) -> bool {
    if (pass == 3) BRAID_THROW(PeerError, "rank 1 died");
    return false;
  };
  EXPECT_THROW(run_wait(s, 0, Deadline::after(60s)), PeerError);
  EXPECT_EQ(s.fails, 1);
  EXPECT_EQ(s.releases, 0);
  EXPECT_NE(s.failed_with.find("rank 1 died"), std::string::npos) << s.failed_with;
}

TEST(WaitLoop, TheDeadlineEndsAWaitEvenWhileProgressKeepsMoving) {
  ScriptedSteps s;
  s.moves = [](int) { return true; };  // bytes flow, but never those waited for
  EXPECT_THROW(run_wait(s, 0, Deadline::after(20ms)), TimeoutError);
  EXPECT_EQ(s.timeouts, 1);
  EXPECT_EQ(s.fails, 1);
  EXPECT_EQ(s.idles, 0);  // a pass that moved is never followed by idling
}

TEST(WaitLoop, IdleTimeGrowsAndNeverWakesPastTheDeadline) {
  ScriptedSteps s;
  const Deadline deadline = Deadline::after(30ms);
  EXPECT_THROW(run_wait(s, 0, deadline), TimeoutError);
  ASSERT_GE(s.idles, 2);
  for (size_t i = 0; i < s.wakes.size(); ++i) {
    EXPECT_LE(s.wakes[i], deadline.at());
    if (i > 0) {
      EXPECT_GE(s.idle_for[i], s.idle_for[i - 1]);
    }
  }
  EXPECT_EQ(s.idle_for.front(), Clock::duration::zero());  // the first idle pass starts it
}

TEST(WaitLoop, AStallIsReportedWithWhatThePendingRequestWaitsFor) {
  testing::LogCapture log;
  ScriptedSteps s;
  EXPECT_THROW(run_wait(s, 3, Deadline::after(50ms).warn_stalls_every(5ms)), TimeoutError);
  EXPECT_FALSE(
      log.matching({"W rank 3 is still waiting", "a receive of 8 bytes from rank 1 (scripted)"})
          .empty())
      << log.text();
}

TEST(WaitLoop, RecheckSendsTheLoopRoundWithoutIdling) {
  ScriptedSteps s;
  // The recheck on pass 2 finds a dead peer: done() on pass 3 throws its error.
  s.rechecks = [](int pass) { return pass == 2; };
  s.finished = [](int pass) -> bool {
    if (pass == 3) BRAID_THROW(PeerError, "rank 1 (process 42) died");
    return false;
  };
  EXPECT_THROW(run_wait(s, 0, Deadline::after(60s)), PeerError);
  EXPECT_EQ(s.idles, 1);  // after pass 1 only
  EXPECT_EQ(s.fails, 1);
}

TEST(WaitLoop, TestLooksOnceAndReleasesOnlyWhatIsDone) {
  ScriptedSteps pending;
  EXPECT_FALSE(run_test(pending));
  EXPECT_EQ(pending.passes, 1);
  EXPECT_EQ(pending.releases + pending.fails + pending.idles, 0);

  ScriptedSteps ready;
  ready.finished = [](int) { return true; };
  EXPECT_TRUE(run_test(ready));
  EXPECT_EQ(ready.releases, 1);

  // A recheck that finds the peer gone makes the test ask done() again, which throws.
  ScriptedSteps dead;
  dead.rechecks = [](int) { return true; };
  dead.finished = [&dead](int) -> bool {
    if (dead.dones == 2) BRAID_THROW(PeerError, "rank 1 died");
    return false;
  };
  EXPECT_THROW(run_test(dead), PeerError);
  EXPECT_EQ(dead.fails, 1);
  EXPECT_EQ(dead.releases, 0);
}

}  // namespace
}  // namespace braid::comm
