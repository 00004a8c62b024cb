// Restarted processes on the shm and tcp transports (Transport::accept_rejoin,
// connect_rejoining_transport), ranks as threads: a new process in a dead rank's place
// talks to the peers that accept it, never sees what its predecessor left unread, fails
// nothing but the requests tied to the dead process, and times out on a peer that never
// accepted it, naming it.
#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "comm/transport_factory.h"
#include "transport_test_util.h"

namespace braid::comm {
namespace {

using namespace testing;

constexpr Tag kTag{7, 0, 1};
constexpr Tag kOtherTag{7, 0, 2};

// What a survivor does once it learns of the restart: waits until the newcomer is ready
// (tcp: in its wait loop), then connects.
void accept_when_published(Transport& t, int peer, Store& store) {
  const Deadline deadline = soon();
  while (!rejoin_published(store)) {
    ASSERT_FALSE(deadline.expired()) << "rank " << peer << "'s new process never published";
    std::this_thread::sleep_for(1ms);
  }
  t.accept_rejoin(peer, store, deadline);
}

CallSignature p2p(uint64_t bytes) {
  CallSignature s;
  s.count = bytes;
  return s;
}

class TransportRejoin : public ::testing::TestWithParam<TransportKind> {
 protected:
  TransportOptions options() const {
    TransportOptions o;
    o.accept_rejoins = true;
    o.shm_ring_bytes = size_t{64} << 10;
    return o;
  }
  // Three ranks over `store`; rank 2 then sends rank 0 a message it never takes and dies.
  World start(const std::shared_ptr<MemoryStore>& store) {
    World world(3);
    run_threads(3, [&](int r) {
      world[static_cast<size_t>(r)] =
          connect_transport(GetParam(), *store, r, 3, test_secret(), soon(), options());
    });
    const int32_t stale = 111;
    world[2]->send(0, kTag, p2p(4), &stale, 4, soon());
    world[2].reset();
    return world;
  }
};

TEST_P(TransportRejoin, ARestartedRankTalksToThePeersThatAcceptItAndNeverSeesItsPredecessors) {
  auto store = std::make_shared<MemoryStore>();
  World world = start(store);
  // Rank 0 was waiting for the dead process: that receive fails once a newcomer takes its
  // place, and names the restart.
  int32_t orphan = 0;
  const RequestId waiting = world[0]->irecv(2, kOtherTag, p2p(4), &orphan, 4);

  auto newcomer =
      connect_rejoining_transport(GetParam(), store, 2, 3, 1, test_secret(), soon(), options());
  const auto rs = rejoin_store(store, 2, 1);
  EXPECT_FALSE(rejoin_published(*rejoin_store(store, 2, 2)));
  run_threads(2, [&](int who) {
    if (who == 0) {
      accept_when_published(*world[0], 2, *rs);
      int32_t got = 0;
      world[0]->recv(2, kTag, p2p(4), &got, 4, soon());
      EXPECT_EQ(got, 222) << "rank 0 read what the dead process left, not the newcomer's";
      const int32_t reply = 333;
      world[0]->send(2, kTag, p2p(4), &reply, 4, soon());
    } else {
      // Sent before rank 0 accepted: it waits for the connection.
      const int32_t mine = 222;
      newcomer->send(0, kTag, p2p(4), &mine, 4, soon());
      int32_t got = 0;
      newcomer->recv(0, kTag, p2p(4), &got, 4, soon());
      EXPECT_EQ(got, 333);
    }
  });
  try {
    world[0]->wait(waiting, soon());
    ADD_FAILURE() << "a receive from the dead process completed";
  } catch (const PeerError& e) {
    EXPECT_TRUE(contains(e.what(), "rank 2 was restarted")) << e.what();
  }
  // Rank 1 never accepted the newcomer: waiting on it ends at the deadline, naming it.
  int32_t never = 0;
  try {
    newcomer->recv(1, kTag, p2p(4), &never, 4, Deadline::after(200ms));
    ADD_FAILURE() << "a receive from a peer that never connected completed";
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(contains(e.what(), "rank 1")) << e.what();
  }
  // Rank 1 and rank 0 still talk as before.
  run_threads(2, [&](int r) {
    int32_t v = r;
    if (r == 0) {
      world[0]->send(1, kTag, p2p(4), &v, 4, soon());
    } else {
      world[1]->recv(0, kTag, p2p(4), &v, 4, soon());
      EXPECT_EQ(v, 0);
    }
  });
}

// The newcomer accepts a restart of its own peer in turn (a restarted worker whose server
// is restarted later).
TEST_P(TransportRejoin, ARestartedRankAcceptsAPeerRestartedAfterIt) {
  auto store = std::make_shared<MemoryStore>();
  World world = start(store);
  auto worker =
      connect_rejoining_transport(GetParam(), store, 2, 3, 1, test_secret(), soon(), options());
  run_threads(2, [&](int who) {
    int32_t v = 1;
    if (who == 0) {
      accept_when_published(*world[0], 2, *rejoin_store(store, 2, 1));
      world[0]->send(2, kTag, p2p(4), &v, 4, soon());
    } else {
      worker->recv(0, kTag, p2p(4), &v, 4, soon());
    }
  });
  world[0].reset();  // now rank 0 dies, and comes back
  auto server =
      connect_rejoining_transport(GetParam(), store, 0, 3, 1, test_secret(), soon(), options());
  run_threads(2, [&](int who) {
    int32_t v = 0;
    if (who == 0) {
      v = 5;
      server->send(2, kTag, p2p(4), &v, 4, soon());
      server->recv(2, kTag, p2p(4), &v, 4, soon());
      EXPECT_EQ(v, 6);
    } else {
      accept_when_published(*worker, 0, *rejoin_store(store, 0, 1));
      worker->recv(0, kTag, p2p(4), &v, 4, soon());
      EXPECT_EQ(v, 5);
      v = 6;
      worker->send(0, kTag, p2p(4), &v, 4, soon());
    }
  });
}

TEST(TransportRejoinShm, AnEarlierProcessThatStillRunsIsNotReplaced) {
  auto store = std::make_shared<MemoryStore>();
  TransportOptions o;
  o.accept_rejoins = true;
  World world(2);
  run_threads(2, [&](int r) {
    world[static_cast<size_t>(r)] =
        connect_transport(TransportKind::shm, *store, r, 2, test_secret(), soon(), o);
  });
  auto newcomer =
      connect_rejoining_transport(TransportKind::shm, store, 1, 2, 1, test_secret(), soon(), o);
  try {
    world[0]->accept_rejoin(1, *rejoin_store(store, 1, 1), soon());
    ADD_FAILURE() << "rank 1's live process was replaced";
  } catch (const IoError& e) {
    EXPECT_TRUE(contains(e.what(), "earlier process")) << e.what();
    EXPECT_TRUE(contains(e.what(), "still runs")) << e.what();
  }
}

TEST(TransportRejoinShm, ATransportMadeWithoutAcceptRejoinsRefusesSaying) {
  auto store = std::make_shared<MemoryStore>();
  World world(2);
  run_threads(2, [&](int r) {
    world[static_cast<size_t>(r)] =
        connect_transport(TransportKind::shm, *store, r, 2, test_secret(), soon());
  });
  world[1].reset();
  try {
    world[0]->accept_rejoin(1, *rejoin_store(store, 1, 1), soon());
    ADD_FAILURE() << "accepted without accept_rejoins";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "accept_rejoins")) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, TransportRejoin,
                         ::testing::Values(TransportKind::shm, TransportKind::tcp),
                         [](const auto& info) {
                           return std::string(transport_kind_name(info.param));
                         });

}  // namespace
}  // namespace braid::comm
