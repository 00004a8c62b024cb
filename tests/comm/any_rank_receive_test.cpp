// Receive from any rank (comm/transport.h's kAnyRank rules) on every transport, as part
// of the Transport contract: each message once with its sender, earliest arrival first,
// post order between named and any-rank receives, reductions, size mismatches, and how it
// fails (only once every peer is gone, or at its deadline).
#include "transport_contract.h"

namespace braid::comm {
namespace {

using namespace contract_testing;  // NOLINT: the contract fixture

class AnyRankReceive : public TransportContract {};

TEST_P(AnyRankReceive, ReceivesTakeEachPeersMessageOnceAndNameItsSender) {
  for (const int n : {2, 3, 5}) {
    World w = make_world(GetParam(), n);
    std::vector<int32_t> got(static_cast<size_t>(n), -1);
    std::vector<int> sources(static_cast<size_t>(n), -7);
    run_threads(n, [&](int me) {
      Transport& t = *w[me];
      if (me != 0) {
        const int32_t value = me;
        t.send(0, tag(1), p2p_sig(4), &value, 4, soon());
        return;
      }
      std::vector<RequestId> ids;
      for (int k = 1; k < n; ++k)
        ids.push_back(t.irecv(kAnyRank, tag(1), p2p_sig(4), &got[k], 4, std::nullopt, &sources[k]));
      t.wait(ids, soon());
    });
    std::set<int> senders;
    for (int k = 1; k < n; ++k) {
      EXPECT_EQ(sources[k], got[k]) << "world of " << n << ", receive " << k;
      senders.insert(sources[k]);
    }
    EXPECT_EQ(senders.size(), static_cast<size_t>(n - 1)) << "world of " << n;
    EXPECT_TRUE(senders.empty() || (*senders.begin() == 1 && *senders.rbegin() == n - 1));
  }
}

TEST_P(AnyRankReceive, ReceiveTakesTheEarliestArrival) {
  // Rank 1's message is surely in before rank 2 sends: rank 0 first takes a message rank 1
  // sent after it, and only then lets rank 2 go.
  World w = make_world(GetParam(), 3);
  int32_t got[2] = {-1, -1};
  int sources[2] = {-7, -7};
  run_threads(3, [&](int me) {
    Transport& t = *w[me];
    const int32_t value = me * 100;
    uint32_t signal = 0;
    if (me == 1) {
      const RequestId ids[] = {t.isend(0, tag(7), p2p_sig(4), &value, 4),
                               t.isend(0, tag(8), p2p_sig(4), &signal, 4)};
      t.wait(ids, soon());
    } else if (me == 2) {
      t.recv(0, tag(9), p2p_sig(4), &signal, 4, soon());
      t.send(0, tag(7), p2p_sig(4), &value, 4, soon());
    } else {
      t.recv(1, tag(8), p2p_sig(4), &signal, 4, soon());
      t.send(2, tag(9), p2p_sig(4), &signal, 4, soon());
      const RequestId ids[] = {
          t.irecv(kAnyRank, tag(7), p2p_sig(4), &got[0], 4, std::nullopt, &sources[0]),
          t.irecv(kAnyRank, tag(7), p2p_sig(4), &got[1], 4, std::nullopt, &sources[1])};
      t.wait(ids, soon());
    }
  });
  EXPECT_EQ(sources[0], 1);
  EXPECT_EQ(got[0], 100);
  EXPECT_EQ(sources[1], 2);
  EXPECT_EQ(got[1], 200);
}

TEST_P(AnyRankReceive, ReceivesMatchMessagesBufferedBeforeThem) {
  // Each peer's payload outgrows the small ring and is in before the receives are posted
  // (rank 0 took a later message from each first); rank 0's message to itself as well.
  const int n = 3;
  World w = make_world(GetParam(), n);
  const size_t bytes = 150'000;
  std::vector<std::vector<uint8_t>> got(n, std::vector<uint8_t>(bytes));
  std::vector<int> sources(n, -7);
  run_threads(n, [&](int me) {
    Transport& t = *w[me];
    const std::vector<uint8_t> mine = pattern(static_cast<uint64_t>(me) + 40, bytes);
    uint32_t signal = 0;
    if (me != 0) {
      const RequestId ids[] = {t.isend(0, tag(3), p2p_sig(bytes), mine.data(), bytes),
                               t.isend(0, tag(4), p2p_sig(4), &signal, 4)};
      t.wait(ids, soon());
      return;
    }
    const RequestId to_self = t.isend(0, tag(3), p2p_sig(bytes), mine.data(), bytes);
    for (int p = 1; p < n; ++p) t.recv(p, tag(4), p2p_sig(4), &signal, 4, soon());
    std::vector<RequestId> ids = {to_self};
    for (int k = 0; k < n; ++k)
      ids.push_back(t.irecv(kAnyRank, tag(3), p2p_sig(bytes), got[k].data(), bytes, std::nullopt,
                            &sources[k]));
    t.wait(ids, soon());
  });
  std::set<int> senders(sources.begin(), sources.end());
  EXPECT_EQ(senders, (std::set<int>{0, 1, 2}));
  for (int k = 0; k < n; ++k)
    EXPECT_TRUE(sources[k] >= 0 && got[k] == pattern(static_cast<uint64_t>(sources[k]) + 40, bytes))
        << "receive " << k << " from rank " << sources[k];
}

TEST_P(AnyRankReceive, NamedAndAnyRankReceivesTakeMessagesInPostOrder) {
  // For one tag: a named receive, then an any-rank one, then a named one, all posted
  // before rank 1 sends three messages; they match in post order.
  World w = make_world(GetParam(), 2);
  int32_t got[3] = {-1, -1, -1};
  int source = -7;
  run_threads(2, [&](int me) {
    Transport& t = *w[me];
    uint32_t signal = 0;
    if (me == 1) {
      t.recv(0, tag(6), p2p_sig(4), &signal, 4, soon());
      const int32_t values[3] = {10, 11, 12};
      std::vector<RequestId> ids;
      for (const int32_t& v : values) ids.push_back(t.isend(0, tag(5), p2p_sig(4), &v, 4));
      t.wait(ids, soon());
      return;
    }
    const RequestId ids[] = {
        t.irecv(1, tag(5), p2p_sig(4), &got[0], 4),
        t.irecv(kAnyRank, tag(5), p2p_sig(4), &got[1], 4, std::nullopt, &source),
        t.irecv(1, tag(5), p2p_sig(4), &got[2], 4)};
    t.send(1, tag(6), p2p_sig(4), &signal, 4, soon());
    t.wait(ids, soon());
  });
  EXPECT_EQ(got[0], 10);
  EXPECT_EQ(got[1], 11);
  EXPECT_EQ(got[2], 12);
  EXPECT_EQ(source, 1);
}

TEST_P(AnyRankReceive, SizeMismatchNamesBothCalls) {
  for (const bool message_first : {false, true}) {
    World w = make_world(GetParam(), 2);
    std::vector<uint8_t> buf(800);
    std::string error;
    run_threads(2, [&](int me) {
      uint32_t signal = 0;
      if (me == 1) {
        try {  // the send may complete or fail along with the receive
          if (!message_first) w[1]->recv(0, tag(6), p2p_sig(4), &signal, 4, Deadline::after(2s));
          const RequestId ids[] = {w[1]->isend(0, tag(2), p2p_sig(400), buf.data(), 400),
                                   w[1]->isend(0, tag(6), p2p_sig(4), &signal, 4)};
          w[1]->wait(ids, Deadline::after(2s));
        } catch (const Error&) {
        }
        return;
      }
      try {
        int source = -1;
        if (message_first) {
          w[0]->recv(1, tag(6), p2p_sig(4), &signal, 4, soon());
          w[0]->recv(kAnyRank, tag(2), p2p_sig(800), buf.data(), 800, soon(), std::nullopt,
                     &source);
        } else {
          const RequestId id =
              w[0]->irecv(kAnyRank, tag(2), p2p_sig(800), buf.data(), 800, std::nullopt, &source);
          w[0]->send(1, tag(6), p2p_sig(4), &signal, 4, soon());
          w[0]->wait(id, soon());
        }
      } catch (const CollectiveMismatch& e) {
        error = e.what();
      }
    });
    EXPECT_TRUE(contains(error, "400")) << error;
    EXPECT_TRUE(contains(error, "800")) << error;
    EXPECT_TRUE(contains(error, "any rank")) << error;
    EXPECT_TRUE(contains(error, "rank 1")) << error;
  }
}

TEST_P(AnyRankReceive, ReceiveReduces) {
  // Receive first (the peers wait for rank 0's go), then message first (rank 0 takes a
  // later message from each peer before posting).
  const int n = 3;
  const size_t count = 50'000;  // 200 KB: more than the small ring
  World w = make_world(GetParam(), n);
  std::vector<std::vector<float>> acc(2 * (n - 1), std::vector<float>(count, 1.0f));
  std::vector<int> sources(2 * (n - 1), -7);
  const Reduction sum{DType::f32, ReduceOp::sum};
  run_threads(n, [&](int me) {
    Transport& t = *w[me];
    uint32_t signal = 0;
    if (me != 0) {
      std::vector<float> mine(count);
      for (size_t i = 0; i < count; ++i) mine[i] = static_cast<float>(me * 10 + i % 7);
      t.recv(0, tag(1), p2p_sig(4), &signal, 4, soon());
      t.send(0, tag(2), p2p_sig(count * 4), mine.data(), count * 4, soon());
      const RequestId ids[] = {t.isend(0, tag(3), p2p_sig(count * 4), mine.data(), count * 4),
                               t.isend(0, tag(4), p2p_sig(4), &signal, 4)};
      t.wait(ids, soon());
      return;
    }
    std::vector<RequestId> ids;
    for (int k = 0; k < n - 1; ++k)
      ids.push_back(t.irecv(kAnyRank, tag(2), p2p_sig(count * 4), acc[k].data(), count * 4, sum,
                            &sources[k]));
    for (int p = 1; p < n; ++p) t.send(p, tag(1), p2p_sig(4), &signal, 4, soon());
    t.wait(ids, soon());
    for (int p = 1; p < n; ++p) t.recv(p, tag(4), p2p_sig(4), &signal, 4, soon());
    ids.clear();
    for (int k = n - 1; k < 2 * (n - 1); ++k)
      ids.push_back(t.irecv(kAnyRank, tag(3), p2p_sig(count * 4), acc[k].data(), count * 4, sum,
                            &sources[k]));
    t.wait(ids, soon());
  });
  for (size_t k = 0; k < acc.size(); ++k) {
    const int s = sources[k];
    EXPECT_TRUE(s == 1 || s == 2) << s;
    size_t bad = 0;
    while (bad < count && acc[k][bad] == 1.0f + static_cast<float>(s * 10 + bad % 7)) ++bad;
    EXPECT_EQ(bad, count) << "receive " << k << " from rank " << s;
  }
  EXPECT_NE(sources[0], sources[1]);
  EXPECT_NE(sources[2], sources[3]);
}

TEST_P(AnyRankReceive, ReceiveOutlivesADeadPeer) {
  World w = make_world(GetParam(), 3);
  std::atomic<int> stage{0};
  int32_t got = -1;
  int source = -7;
  run_threads(3, [&](int me) {
    if (me == 1) {
      w[1].reset();  // rank 1 goes away, as a rank that dies or finishes does
      stage = 1;
      return;
    }
    if (me == 2) {
      while (stage.load() < 2) std::this_thread::yield();
      const int32_t value = 2;
      w[2]->send(0, tag(4), p2p_sig(4), &value, 4, soon());
      return;
    }
    while (stage.load() < 1) std::this_thread::yield();
    Transport& t = *w[0];
    const RequestId id = t.irecv(kAnyRank, tag(4), p2p_sig(4), &got, 4, std::nullopt, &source);
    // Poll for a while with rank 1 gone (each poll looks at the peers), then let rank 2 send.
    bool done = false;
    for (const auto until = Clock::now() + 300ms; !done && Clock::now() < until;) {
      done = t.test(id);
      std::this_thread::sleep_for(1ms);
    }
    require(!done, "a receive that nobody sent to completed");
    stage = 2;
    t.wait(id, soon());
  });
  EXPECT_EQ(source, 2);
  EXPECT_EQ(got, 2);
}

TEST_P(AnyRankReceive, ReceiveFailsOnceEveryPeerIsGone) {
  World w = make_world(GetParam(), 3);
  int32_t value = 1, got = -1;
  int source = -7;
  // On a stream what a peer sent before it went still arrives (inproc drops it with the rank).
  if (streams()) w[1]->send(0, tag(2), p2p_sig(4), &value, 4, soon());
  w[1].reset();
  w[2].reset();
  if (streams()) {
    w[0]->recv(kAnyRank, tag(2), p2p_sig(4), &got, 4, soon(), std::nullopt, &source);
    EXPECT_EQ(source, 1);
    EXPECT_EQ(got, 1);
  }
  try {
    w[0]->recv(kAnyRank, tag(2), p2p_sig(4), &got, 4, soon(), std::nullopt, &source);
    FAIL() << "no PeerError";
  } catch (const PeerError& e) {
    EXPECT_TRUE(contains(e.what(), "every other rank is gone")) << e.what();
    EXPECT_TRUE(contains(e.what(), "rank 1")) << e.what();
    EXPECT_TRUE(contains(e.what(), "rank 2")) << e.what();
    EXPECT_TRUE(contains(e.what(), "any rank")) << e.what();
  }
}

TEST_P(AnyRankReceive, ReceiveWithLivePeersTimesOutNamingAnyRank) {
  World w = make_world(GetParam(), 3);
  int32_t got = -1;
  try {
    w[0]->recv(kAnyRank, tag(2, 0), p2p_sig(4), &got, 4, Deadline::after(200ms));
    FAIL() << "no timeout";
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(contains(e.what(), "from any rank")) << e.what();
    EXPECT_TRUE(contains(e.what(), " s")) << e.what();
  }
  if (!streams()) return;  // inproc closes a rank whose wait threw
  // The withdrawn receive takes nothing; a new one gets the next message.
  const int32_t value = 22;
  int source = -7;
  run_threads(3, [&](int me) {
    if (me == 2) w[2]->send(0, tag(2), p2p_sig(4), &value, 4, soon());
    if (me == 0) w[0]->recv(kAnyRank, tag(2), p2p_sig(4), &got, 4, soon(), std::nullopt, &source);
  });
  EXPECT_EQ(source, 2);
  EXPECT_EQ(got, 22);
}

INSTANTIATE_TEST_SUITE_P(All, AnyRankReceive, ::testing::ValuesIn(kinds()), kind_test_name);

}  // namespace
}  // namespace braid::comm
