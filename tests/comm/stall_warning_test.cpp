// The stall inspector on every transport: a rank whose peer never joins a collective
// logs whom it waits for, on which call (with its sequence number), before the deadline
// turns the wait into a TimeoutError, and repeats that at most once per interval.
// Ranks are threads; rank 1 connects and then never calls anything.
#include <gtest/gtest.h>

#include <string>

#include "comm/collectives.h"
#include "comm/group.h"
#include "comm/inproc_transport.h"
#include "comm/log_capture.h"
#include "comm/shm_transport.h"
#include "comm/tcp_transport.h"
#include "comm/transport_test_util.h"

namespace braid::comm {
namespace {

using namespace std::chrono_literals;
using braid::testing::LogCapture;
using testing::connect_world;
using testing::soon;
using testing::test_secret;
using testing::World;

World make_world(const std::string& kind) {
  if (kind == "inproc") return make_inproc_transports(2);
  if (kind == "shm")
    return connect_world(
        [](Store& s, int r, int n) { return connect_shm_transport(s, r, n, soon()); }, 2);
  return connect_world(
      [](Store& s, int r, int n) {
        TransportOptions o;
        o.listen_host = "127.0.0.1";
        o.advertise_host = "127.0.0.1";
        return connect_tcp_transport(s, r, n, test_secret(), soon(), o);
      },
      2);
}

class StallWarning : public ::testing::TestWithParam<std::string> {};

TEST_P(StallWarning, AStuckPeerIsNamedWithTheCallLongBeforeTheDeadline) {
  World world = make_world(GetParam());
  GroupOptions options;
  options.timeout = 1500ms;
  options.stall_warning = 100ms;
  auto group = Group::world(world[0], options);
  float x[4] = {1, 2, 3, 4};
  LogCapture log;
  std::string error;
  try {
    allreduce(*group, x, 4, DType::f32, ReduceOp::sum);
    ADD_FAILURE() << "the allreduce finished without rank 1";
  } catch (const TimeoutError& e) {
    error = e.what();
  }
  // Everything logged so far came before the TimeoutError.
  const auto warnings = log.matching({"W ", "rank 0 is still waiting", "rank 1", "allreduce #1"});
  ASSERT_FALSE(warnings.empty()) << "no stall warning before: " << error << "\n" << log.text();
  EXPECT_NE(warnings.front().find("gives up in"), std::string::npos) << warnings.front();
  // At most one per interval: 1.5 s / 0.1 s.
  EXPECT_LE(warnings.size(), 16u) << log.text();
}

TEST_P(StallWarning, AnAnyRankReceiveIsNamedAsFromAnyRank) {
  World world = make_world(GetParam());
  GroupOptions options;
  options.timeout = 600ms;
  options.stall_warning = 100ms;
  auto group = Group::world(world[0], options);
  int32_t x = 0;
  int source = -1;
  LogCapture log;
  std::string error;
  try {
    group->wait(group->irecv_any(5, &x, 4, &source));
    ADD_FAILURE() << "a receive that nobody sent to completed";
  } catch (const TimeoutError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("from any rank"), std::string::npos) << error;
  const auto warnings = log.matching({"W ", "rank 0 is still waiting", "from any rank"});
  EXPECT_FALSE(warnings.empty()) << "no stall warning before: " << error << "\n" << log.text();
}

TEST_P(StallWarning, NoWarningWhenTheIntervalIsZero) {
  World world = make_world(GetParam());
  GroupOptions options;
  options.timeout = 300ms;
  options.stall_warning = 0ms;
  auto group = Group::world(world[0], options);
  float x[4] = {1, 2, 3, 4};
  LogCapture log;
  EXPECT_THROW(allreduce(*group, x, 4, DType::f32, ReduceOp::sum), TimeoutError);
  EXPECT_TRUE(log.matching({"still waiting"}).empty()) << log.text();
}

TEST(StallWarningDefaults, AGroupWarnsAfterThirtySecondsUnlessTold) {
  EXPECT_EQ(GroupOptions{}.stall_warning, 30s);
  EXPECT_EQ(kDefaultStallWarning, 30s);
}

INSTANTIATE_TEST_SUITE_P(Transports, StallWarning, ::testing::Values("inproc", "shm", "tcp"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace braid::comm
