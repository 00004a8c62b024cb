// MpiTransport keeps the Transport contract (comm/transport.h) under mpirun, for whatever
// number of ranks the job has: tag matching per (peer, whole Tag) whatever the order of
// posting, early messages, zero-byte and self messages, reducing receives, size and
// signature mismatches, the early-message bound, and deadlines. Each test builds its own
// transport (a private duplicate of MPI_COMM_WORLD), so a test that leaves a transport
// unusable on purpose cannot disturb the next.
#include "comm/mpi/mpi_transport.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "mpi/mpi_test_main.h"

namespace braid::comm {
namespace {

using namespace std::chrono_literals;
using mpi_test::world_rank;
using mpi_test::world_size;

CallSignature p2p_sig(size_t bytes) {
  CallSignature sig;
  sig.call = CallKind::p2p;
  sig.dtype = DType::f32;
  sig.count = bytes;
  return sig;
}

// Byte i of the message from `from` to `to` with tag step `step`.
uint8_t pattern(int from, int to, uint32_t step, size_t i) {
  return static_cast<uint8_t>(i * 131 + static_cast<size_t>(from) * 17 +
                              static_cast<size_t>(to) * 7 + step * 29 + 3);
}

Deadline soon() { return Deadline::after(30s); }

// Every rank sends to every rank (itself too) one message per size, tagged by its index;
// receives are posted in the reverse order, so most messages arrive before their receive.
TEST(MpiTransport, AllPairsEverySizeReverseOrder) {
  MpiTransport t(MPI_COMM_WORLD);
  const int n = t.size(), me = t.rank();
  EXPECT_EQ(n, world_size());
  EXPECT_EQ(me, world_rank());
  EXPECT_EQ(t.name(), "mpi");
  const std::vector<size_t> sizes = {0, 1, 7, 1000, 4099 * 8, size_t{3} << 20};
  std::vector<std::vector<uint8_t>> out, in;
  std::vector<RequestId> sends, recvs;
  for (int peer = 0; peer < n; ++peer) {
    for (uint32_t s = 0; s < sizes.size(); ++s) {
      std::vector<uint8_t> buf(sizes[s]);
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = pattern(me, peer, s, i);
      out.push_back(std::move(buf));
      sends.push_back(t.isend(peer, Tag{1, 1, s}, p2p_sig(sizes[s]), out.back().data(), sizes[s]));
    }
  }
  in.reserve(static_cast<size_t>(n) * sizes.size());
  for (int peer = n - 1; peer >= 0; --peer) {
    for (uint32_t s = static_cast<uint32_t>(sizes.size()); s-- > 0;) {
      in.emplace_back(sizes[s], 0);
      recvs.push_back(t.irecv(peer, Tag{1, 1, s}, p2p_sig(sizes[s]), in.back().data(), sizes[s]));
    }
  }
  try {
    t.wait(recvs, soon());
    t.wait(sends, soon());
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
    return;  // every rank reaches the end of this test without another collective call
  }
  size_t k = 0;
  for (int peer = n - 1; peer >= 0; --peer) {
    for (uint32_t s = static_cast<uint32_t>(sizes.size()); s-- > 0; ++k) {
      size_t bad = 0;
      while (bad < in[k].size() && in[k][bad] == pattern(peer, me, s, bad)) ++bad;
      EXPECT_EQ(bad, in[k].size())
          << "message of " << sizes[s] << " bytes from rank " << peer << " differs at byte " << bad;
    }
  }
}

// Messages with equal tags from one peer match receives in the order both were made.
TEST(MpiTransport, EqualTagsMatchInOrderIncludingZeroBytes) {
  MpiTransport t(MPI_COMM_WORLD);
  const int n = t.size(), me = t.rank();
  const int to = (me + 1) % n, from = (me + n - 1) % n;
  constexpr int kMessages = 5;
  std::vector<uint64_t> out(kMessages), in(kMessages, 0);
  std::vector<RequestId> ids;
  for (int m = 0; m < kMessages; ++m) {
    out[m] = static_cast<uint64_t>(me) * 1000 + static_cast<uint64_t>(m);
    ids.push_back(t.isend(to, Tag{2, 1, 0}, p2p_sig(8), &out[m], 8));
    ids.push_back(t.isend(to, Tag{2, 1, 1}, p2p_sig(0), nullptr, 0));  // interleaved empties
  }
  for (int m = 0; m < kMessages; ++m) {
    ids.push_back(t.irecv(from, Tag{2, 1, 1}, p2p_sig(0), nullptr, 0));
    ids.push_back(t.irecv(from, Tag{2, 1, 0}, p2p_sig(8), &in[m], 8));
  }
  EXPECT_NO_THROW(t.wait(ids, soon()));
  for (int m = 0; m < kMessages; ++m)
    EXPECT_EQ(in[m], static_cast<uint64_t>(from) * 1000 + static_cast<uint64_t>(m));
}

// A receive with a Reduction combines into its buffer: dst = dst + incoming, exactly for
// small integers in f32 and i64, whether the message came first or the receive.
TEST(MpiTransport, ReducingReceiveCombinesIntoTheBuffer) {
  MpiTransport t(MPI_COMM_WORLD);
  const int n = t.size(), me = t.rank();
  const int to = (me + 1) % n, from = (me + n - 1) % n;
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{4099}}) {
    std::vector<float> fout(count), fin(count);
    std::vector<int64_t> iout(count), iin(count);
    for (size_t i = 0; i < count; ++i) {
      fout[i] = static_cast<float>(me * 3 + static_cast<int>(i % 11));
      fin[i] = static_cast<float>(i % 5);
      iout[i] = (int64_t{1} << 40) * me + static_cast<int64_t>(i);
      iin[i] = -static_cast<int64_t>(i);
    }
    CallSignature fsig{CallKind::allreduce, DType::f32, ReduceOp::sum, 0, -1, count};
    CallSignature isig{CallKind::allreduce, DType::i64, ReduceOp::max, 0, -1, count};
    std::vector<RequestId> ids;
    ids.push_back(t.isend(to, Tag{3, 1, 0}, fsig, fout.data(), count * 4));
    ids.push_back(t.irecv(from, Tag{3, 1, 0}, fsig, fin.data(), count * 4,
                          Reduction{DType::f32, ReduceOp::sum}));
    ids.push_back(t.irecv(from, Tag{3, 2, 0}, isig, iin.data(), count * 8,
                          Reduction{DType::i64, ReduceOp::max}));
    ids.push_back(t.isend(to, Tag{3, 2, 0}, isig, iout.data(), count * 8));
    EXPECT_NO_THROW(t.wait(ids, soon()));
    for (size_t i = 0; i < count; ++i) {
      EXPECT_EQ(fin[i],
                static_cast<float>(from * 3 + static_cast<int>(i % 11) + static_cast<int>(i % 5)))
          << "count " << count << " element " << i;
      EXPECT_EQ(iin[i], std::max((int64_t{1} << 40) * from + static_cast<int64_t>(i),
                                 -static_cast<int64_t>(i)))
          << "count " << count << " element " << i;
    }
  }
}

// test() drives progress and reports completion once, then releases the request.
TEST(MpiTransport, TestPollsToCompletion) {
  MpiTransport t(MPI_COMM_WORLD);
  const int me = t.rank();
  uint32_t out = 0xC0FFEEu + static_cast<uint32_t>(me), in = 0;
  const RequestId recv = t.irecv(me, Tag{4, 1, 0}, p2p_sig(4), &in, 4);
  const RequestId send = t.isend(me, Tag{4, 1, 0}, p2p_sig(4), &out, 4);
  bool recv_done = false, send_done = false;
  for (int spins = 0; spins < 1'000'000 && !(recv_done && send_done); ++spins) {
    if (!recv_done) recv_done = t.test(recv);
    if (!send_done) send_done = t.test(send);
  }
  EXPECT_TRUE(recv_done && send_done);
  EXPECT_EQ(in, out);
  EXPECT_THROW(t.test(recv), Error) << "a completed request is released";
}

// A receive whose message has another length is a CollectiveMismatch naming both calls,
// whether the message was early or the receive was posted first.
TEST(MpiTransport, LengthMismatchNamesBothCalls) {
  for (bool message_first : {true, false}) {
    MpiTransport t(MPI_COMM_WORLD);
    const int me = t.rank();
    std::vector<float> out(8, 1.0f), in(9, 0.0f);
    CallSignature sent{CallKind::allreduce, DType::f32, ReduceOp::sum, 0, -1, 8};
    CallSignature wanted{CallKind::allreduce, DType::f32, ReduceOp::sum, 0, -1, 9};
    try {
      RequestId send = 0, recv = 0;
      if (message_first) {
        send = t.isend(me, Tag{5, 7, 0}, sent, out.data(), 32);
        recv = t.irecv(me, Tag{5, 7, 0}, wanted, in.data(), 36);
      } else {
        recv = t.irecv(me, Tag{5, 7, 0}, wanted, in.data(), 36);
        send = t.isend(me, Tag{5, 7, 0}, sent, out.data(), 32);
      }
      t.wait(recv, soon());
      ADD_FAILURE() << "a 32-byte message matched a 36-byte receive";
      (void)send;
    } catch (const CollectiveMismatch& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("8 elements"), std::string::npos) << what;
      EXPECT_NE(what.find("9 elements"), std::string::npos) << what;
      EXPECT_NE(what.find("allreduce #7"), std::string::npos) << what;
    }
  }
}

// A collective message with the receive's (channel, seq) but another signature is a
// CollectiveMismatch even when its step differs (the ranks are in different calls).
TEST(MpiTransport, SignatureMismatchOnTheSameCall) {
  for (bool message_first : {true, false}) {
    MpiTransport t(MPI_COMM_WORLD);
    const int me = t.rank();
    int32_t out[4] = {1, 2, 3, 4};
    float in[4] = {};
    CallSignature sent{CallKind::broadcast, DType::i32, ReduceOp::sum, 0, 0, 4};
    CallSignature wanted{CallKind::allreduce, DType::f32, ReduceOp::max, 0, -1, 4};
    bool threw = false;
    try {
      if (message_first) {
        t.isend(me, Tag{6, 3, 1}, sent, out, sizeof out);
        const RequestId r = t.irecv(me, Tag{6, 3, 2}, wanted, in, sizeof in);
        t.wait(r, soon());
      } else {
        const RequestId r = t.irecv(me, Tag{6, 3, 2}, wanted, in, sizeof in);
        t.isend(me, Tag{6, 3, 1}, sent, out, sizeof out);
        t.wait(r, soon());
      }
    } catch (const CollectiveMismatch& e) {
      threw = true;
      const std::string what = e.what();
      EXPECT_NE(what.find("broadcast #3 (i32"), std::string::npos) << what;
      EXPECT_NE(what.find("allreduce #3 (f32 max"), std::string::npos) << what;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "expected CollectiveMismatch, got: " << e.what();
      threw = true;
    }
    EXPECT_TRUE(threw) << (message_first ? "message first" : "receive first");
  }
}

// An early message past the bound fails the job's wait with PeerError naming the peer.
TEST(MpiTransport, EarlyMessagesAreBounded) {
  MpiTransport t(MPI_COMM_WORLD, MpiTransportOptions{.max_buffered_bytes = 1000});
  const int me = t.rank();
  std::vector<uint8_t> out(600, 7), in(4);
  t.isend(me, Tag{7, 1, 0}, p2p_sig(600), out.data(), 600);
  t.isend(me, Tag{7, 1, 1}, p2p_sig(600), out.data(), 600);
  const RequestId r = t.irecv(me, Tag{7, 1, 9}, p2p_sig(4), in.data(), 4);
  try {
    t.wait(r, soon());
    ADD_FAILURE() << "1200 early bytes passed a bound of 1000";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(me)), std::string::npos)
        << e.what();
  }
}

// A wait that outlives its deadline throws TimeoutError naming the peer and the call; the
// receive is withdrawn, so the transport goes on working.
TEST(MpiTransport, DeadlineNamesPeerCallAndSeconds) {
  MpiTransport t(MPI_COMM_WORLD);
  const int me = t.rank();
  uint64_t in = 0, out = 42;
  CallSignature sig{CallKind::reduce, DType::i64, ReduceOp::sum, 0, 0, 1};
  const RequestId r = t.irecv(me, Tag{8, 11, 0}, sig, &in, 8);
  try {
    t.wait(r, Deadline::after(50ms));
    ADD_FAILURE() << "a receive that nobody sends to completed";
  } catch (const TimeoutError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("reduce #11"), std::string::npos) << what;
    EXPECT_NE(what.find("from rank " + std::to_string(me)), std::string::npos) << what;
    EXPECT_NE(what.find(" s "), std::string::npos) << what;
  }
  EXPECT_THROW(t.test(r), Error) << "the timed-out receive was released";
  // The withdrawn receive must not swallow a later message with its tag.
  const RequestId send = t.isend(me, Tag{8, 11, 0}, sig, &out, 8);
  t.recv(me, Tag{8, 11, 0}, sig, &in, 8, soon());
  t.wait(send, soon());
  EXPECT_EQ(in, 42u);
}

// A receive from any rank (kAnyRank) takes each rank's message once and names its sender:
// rank 0 receives one message from every rank, itself included.
TEST(MpiTransport, AnyRankReceivesNameTheirSenders) {
  MpiTransport t(MPI_COMM_WORLD);
  const int n = t.size(), me = t.rank();
  const int32_t value = me;
  std::vector<int32_t> got(static_cast<size_t>(n), -1);
  std::vector<int> sources(static_cast<size_t>(n), -7);
  std::vector<RequestId> ids = {t.isend(0, Tag{9, 1, 0}, p2p_sig(4), &value, 4)};
  if (me == 0)
    for (int k = 0; k < n; ++k)
      ids.push_back(
          t.irecv(kAnyRank, Tag{9, 1, 0}, p2p_sig(4), &got[k], 4, std::nullopt, &sources[k]));
  EXPECT_NO_THROW(t.wait(ids, soon()));
  if (me != 0) return;
  std::vector<bool> seen(static_cast<size_t>(n), false);
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(sources[k], got[k]);
    ASSERT_TRUE(sources[k] >= 0 && sources[k] < n) << sources[k];
    EXPECT_FALSE(seen[static_cast<size_t>(sources[k])]) << "rank " << sources[k] << " twice";
    seen[static_cast<size_t>(sources[k])] = true;
  }
}

// Any-rank receives take messages in arrival order, reduce, and fail on a size
// disagreement (CollectiveMismatch naming both calls) or at their deadline (TimeoutError
// saying "from any rank").
TEST(MpiTransport, AnyRankReceiveOrderReductionAndErrors) {
  MpiTransport t(MPI_COMM_WORLD);
  const int me = t.rank();
  const float first[2] = {1.0f, 2.0f}, second[2] = {10.0f, 20.0f};
  float got[2][2] = {{0.5f, 0.5f}, {0.0f, 0.0f}};
  int sources[2] = {-7, -7};
  const RequestId ids[] = {
      t.isend(me, Tag{10, 1, 0}, p2p_sig(8), first, 8),
      t.isend(me, Tag{10, 1, 0}, p2p_sig(8), second, 8),
      t.irecv(kAnyRank, Tag{10, 1, 0}, p2p_sig(8), got[0], 8, Reduction{DType::f32, ReduceOp::sum},
              &sources[0]),
      t.irecv(kAnyRank, Tag{10, 1, 0}, p2p_sig(8), got[1], 8, std::nullopt, &sources[1])};
  EXPECT_NO_THROW(t.wait(ids, soon()));
  EXPECT_EQ(sources[0], me);
  EXPECT_EQ(sources[1], me);
  EXPECT_EQ(got[0][0], 1.5f);
  EXPECT_EQ(got[0][1], 2.5f);
  EXPECT_EQ(got[1][0], 10.0f);
  EXPECT_EQ(got[1][1], 20.0f);

  uint64_t out = 5;
  uint8_t in[12] = {};
  t.isend(me, Tag{10, 2, 0}, p2p_sig(8), &out, 8);
  try {
    t.recv(kAnyRank, Tag{10, 2, 0}, p2p_sig(12), in, 12, soon());
    ADD_FAILURE() << "an 8-byte message matched a 12-byte receive";
  } catch (const CollectiveMismatch& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("any rank"), std::string::npos) << what;
    EXPECT_NE(what.find("8 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("12 bytes"), std::string::npos) << what;
  }
  try {
    t.recv(kAnyRank, Tag{10, 3, 0}, p2p_sig(4), in, 4, Deadline::after(50ms));
    ADD_FAILURE() << "a receive that nobody sends to completed";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("from any rank"), std::string::npos) << e.what();
  }
}

// Misuse is a braid::Error, not a crash or a hang.
TEST(MpiTransport, UnknownRequestIsAnError) {
  MpiTransport t(MPI_COMM_WORLD);
  const RequestId bogus = 123456;
  EXPECT_THROW(t.wait(bogus, soon()), Error);
  EXPECT_THROW(t.isend(t.size(), Tag{}, p2p_sig(0), nullptr, 0), Error);
  EXPECT_THROW(t.irecv(-2, Tag{}, p2p_sig(0), nullptr, 0), Error);  // -1 is kAnyRank
}

}  // namespace
}  // namespace braid::comm
