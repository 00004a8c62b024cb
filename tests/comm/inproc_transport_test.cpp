// The in-process transport against the contract of comm/transport.h: tag matching and
// ordering, buffering of early messages and its bound, receives with a reduction, self
// sends, zero-byte messages, size and signature mismatches naming both calls, dead peers
// and deadlines naming the peer.
#include "comm/inproc_transport.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <latch>
#include <numeric>
#include <random>
#include <vector>

#include "comm/inproc_ranks.h"
#include "core/convert.h"

namespace braid::comm {
namespace {

using namespace std::chrono_literals;
using testing::message;
using testing::rethrow_first;
using testing::run_transports;

constexpr uint32_t kChannel = 7;

Tag tag(uint32_t step, uint32_t seq = 0) { return {kChannel, seq, step}; }

CallSignature p2p(size_t bytes) {
  CallSignature s;
  s.count = bytes;
  return s;
}

CallSignature collective(CallKind call, size_t count, DType dtype = DType::f32,
                         ReduceOp op = ReduceOp::sum, int root = -1) {
  CallSignature s;
  s.call = call;
  s.count = count;
  s.dtype = dtype;
  s.op = op;
  s.root = root;
  return s;
}

Deadline soon() { return Deadline::after(30s); }

TEST(InprocTransport, BasicsAndNames) {
  auto ts = make_inproc_transports(3);
  ASSERT_EQ(ts.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(ts[static_cast<size_t>(r)]->rank(), r);
    EXPECT_EQ(ts[static_cast<size_t>(r)]->size(), 3);
    EXPECT_EQ(ts[static_cast<size_t>(r)]->name(), "inproc");
  }
  EXPECT_THROW(make_inproc_transports(0), Error);
  EXPECT_THROW(ts[0]->isend(3, tag(0), p2p(0), nullptr, 0), Error);
  EXPECT_THROW(ts[0]->irecv(-2, tag(0), p2p(0), nullptr, 0), Error);  // -1 is kAnyRank
}

// Sends posted long before and long after their receives, in both directions.
TEST(InprocTransport, SendRecvEitherOrder) {
  std::latch posted(2), sent(1);
  auto errors = run_transports(2, [&](int r, const std::shared_ptr<Transport>& t) {
    std::vector<int> out(1000), in(1000, -1);
    std::iota(out.begin(), out.end(), r * 1000);
    if (r == 0) {
      // Receive first: the peer's send finds it posted and is copied straight across.
      const RequestId rid = t->irecv(1, tag(1), p2p(4000), in.data(), 4000);
      posted.count_down();
      t->wait(rid, soon());
      // Send first: it completes by buffering, since the peer receives only afterwards.
      t->send(1, tag(2), p2p(4000), out.data(), 4000, soon());
      out.assign(1000, 0);  // the send completed: the buffer is free again
      sent.count_down();
    } else {
      posted.arrive_and_wait();
      t->send(0, tag(1), p2p(4000), out.data(), 4000, soon());
      sent.wait();
      t->recv(0, tag(2), p2p(4000), in.data(), 4000, soon());
    }
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(in[static_cast<size_t>(i)], (1 - r) * 1000 + i);
  });
  rethrow_first(errors);
}

// Equal tags match in send order; different tags match whatever the posting order.
TEST(InprocTransport, MatchesByTagInOrder) {
  auto errors = run_transports(2, [&](int r, const std::shared_ptr<Transport>& t) {
    if (r == 0) {
      const int a = 1, b = 2, c = 3, d = 4;
      const RequestId ids[] = {
          t->isend(1, tag(5), p2p(4), &a, 4), t->isend(1, tag(5), p2p(4), &b, 4),
          t->isend(1, tag(9), p2p(4), &c, 4), t->isend(1, tag(5, 1), p2p(4), &d, 4)};
      t->wait(ids, soon());
    } else {
      int x = 0, y = 0, z = 0, w = 0;
      const RequestId ids[] = {
          t->irecv(0, tag(9), p2p(4), &z, 4), t->irecv(0, tag(5, 1), p2p(4), &w, 4),
          t->irecv(0, tag(5), p2p(4), &x, 4), t->irecv(0, tag(5), p2p(4), &y, 4)};
      t->wait(ids, soon());
      EXPECT_EQ(x, 1);
      EXPECT_EQ(y, 2);
      EXPECT_EQ(z, 3);
      EXPECT_EQ(w, 4);
    }
  });
  rethrow_first(errors);
}

TEST(InprocTransport, SelfSendAndZeroBytes) {
  auto errors = run_transports(2, [&](int r, const std::shared_ptr<Transport>& t) {
    // Send to oneself before the receive exists: the wait must not deadlock.
    const double v = 2.5 + r;
    double got = 0;
    t->send(r, tag(1), p2p(8), &v, 8, soon());
    t->recv(r, tag(1), p2p(8), &got, 8, soon());
    EXPECT_EQ(got, v);
    // Zero-byte messages are real: they match, in order, with null buffers.
    const int peer = 1 - r;
    const RequestId ids[] = {t->isend(peer, tag(2), p2p(0), nullptr, 0),
                             t->irecv(peer, tag(2), p2p(0), nullptr, 0)};
    t->wait(ids, soon());
  });
  rethrow_first(errors);
}

TEST(InprocTransport, ReceiveWithReduction) {
  auto errors = run_transports(2, [&](int r, const std::shared_ptr<Transport>& t) {
    if (r == 0) {
      const float f[3] = {1.5f, -2.0f, 4.0f};
      const int32_t i[3] = {5, -7, 9};
      BFloat16 h[2] = {float_to_bf16(1.0f), float_to_bf16(3.0f)};
      const RequestId ids[] = {t->isend(1, tag(1), p2p(12), f, 12),
                               t->isend(1, tag(2), p2p(12), i, 12),
                               t->isend(1, tag(3), p2p(4), h, 4)};
      t->wait(ids, soon());
    } else {
      float f[3] = {1.0f, 1.0f, 1.0f};
      int32_t i[3] = {6, -8, 9};
      BFloat16 h[2] = {float_to_bf16(0.5f), float_to_bf16(0.25f)};
      t->recv(0, tag(1), p2p(12), f, 12, soon(), Reduction{DType::f32, ReduceOp::sum});
      t->recv(0, tag(2), p2p(12), i, 12, soon(), Reduction{DType::i32, ReduceOp::max});
      t->recv(0, tag(3), p2p(4), h, 4, soon(), Reduction{DType::bf16, ReduceOp::prod});
      EXPECT_EQ(f[0], 2.5f);
      EXPECT_EQ(f[1], -1.0f);
      EXPECT_EQ(f[2], 5.0f);
      EXPECT_EQ(i[0], 6);
      EXPECT_EQ(i[1], -7);
      EXPECT_EQ(i[2], 9);
      EXPECT_EQ(bf16_to_float(h[0]), 0.5f);
      EXPECT_EQ(bf16_to_float(h[1]), 0.75f);
    }
  });
  rethrow_first(errors);
  auto ts = make_inproc_transports(1);
  char buf[6];
  EXPECT_THROW(ts[0]->irecv(0, tag(1), p2p(6), buf, 6, Reduction{DType::f32, ReduceOp::sum}),
               Error);
}

// Many messages with shuffled tags in both directions at once, some with reductions.
TEST(InprocTransport, ManyMessagesStress) {
  constexpr int kMessages = 300;
  auto errors = run_transports(3, [&](int r, const std::shared_ptr<Transport>& t) {
    std::mt19937 gen(42);  // the same order on every rank
    std::vector<uint32_t> order(kMessages);
    std::iota(order.begin(), order.end(), 0u);
    std::shuffle(order.begin(), order.end(), gen);
    const int right = (r + 1) % 3, left = (r + 2) % 3;
    std::vector<int64_t> out(kMessages), in(kMessages, 1);
    for (int i = 0; i < kMessages; ++i) out[static_cast<size_t>(i)] = r * 100000 + i;
    // Receives in the reverse of the send order, all posted up front; sends waited in
    // batches, so some find their receive posted and some arrive before it.
    std::vector<RequestId> recvs, sends;
    for (int i = kMessages - 1; i >= 0; --i) {
      const uint32_t s = order[static_cast<size_t>(i)];
      if (i % 2)
        recvs.push_back(
            t->irecv(left, tag(s), p2p(8), &in[s], 8, Reduction{DType::i64, ReduceOp::prod}));
    }
    for (int i = 0; i < kMessages; ++i) {
      const uint32_t s = order[static_cast<size_t>(i)];
      sends.push_back(t->isend(right, tag(s), p2p(8), &out[s], 8));
      if (i % 50 == 49) {
        t->wait(sends, soon());
        sends.clear();
      }
    }
    for (int i = kMessages - 1; i >= 0; --i) {
      const uint32_t s = order[static_cast<size_t>(i)];
      if (i % 2 == 0)
        recvs.push_back(
            t->irecv(left, tag(s), p2p(8), &in[s], 8, Reduction{DType::i64, ReduceOp::prod}));
    }
    t->wait(recvs, soon());
    for (int i = 0; i < kMessages; ++i) ASSERT_EQ(in[static_cast<size_t>(i)], left * 100000 + i);
  });
  rethrow_first(errors);
}

TEST(InprocTransport, TestPollsWithoutBlocking) {
  std::latch sent(1);
  auto errors = run_transports(2, [&](int r, const std::shared_ptr<Transport>& t) {
    int v = 0;
    if (r == 0) {
      const RequestId id = t->irecv(1, tag(1), p2p(4), &v, 4);
      EXPECT_FALSE(t->test(id));
      sent.count_down();
      while (!t->test(id)) std::this_thread::yield();
      EXPECT_EQ(v, 42);
    } else {
      sent.wait();
      v = 42;
      t->send(0, tag(1), p2p(4), &v, 4, soon());
    }
  });
  rethrow_first(errors);
}

TEST(InprocTransport, SizeMismatchNamesBothCalls) {
  auto errors = run_transports(2, [&](int r, const std::shared_ptr<Transport>& t) {
    std::vector<float> buf(101);
    const size_t count = r == 0 ? 100 : 101;
    const auto sig = collective(CallKind::allreduce, count);
    const RequestId ids[] = {t->isend(1 - r, tag(0, 3), sig, buf.data(), count * 4),
                             t->irecv(1 - r, tag(0, 3), sig, buf.data(), count * 4)};
    t->wait(ids, soon());
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[static_cast<size_t>(r)]);
    EXPECT_THROW(std::rethrow_exception(errors[static_cast<size_t>(r)]), CollectiveMismatch);
    const std::string m = message(errors[static_cast<size_t>(r)]);
    EXPECT_NE(m.find("allreduce #3 (f32 sum, 100 elements)"), std::string::npos) << m;
    EXPECT_NE(m.find("allreduce #3 (f32 sum, 101 elements)"), std::string::npos) << m;
  }
}

// Another signature under the same (channel, seq) is caught even when the steps differ.
TEST(InprocTransport, SignatureMismatchAcrossSteps) {
  auto errors = run_transports(2, [&](int r, const std::shared_ptr<Transport>& t) {
    float buf[4] = {};
    if (r == 0) {
      t->send(1, tag(7, 2), collective(CallKind::broadcast, 4, DType::f32, ReduceOp::sum, 0), buf,
              16, soon());
      t->recv(1, tag(8, 2), collective(CallKind::broadcast, 4, DType::f32, ReduceOp::sum, 0), buf,
              16, soon());
    } else {
      t->recv(0, tag(0, 2), collective(CallKind::allreduce, 4), buf, 16, soon());
    }
  });
  ASSERT_TRUE(errors[1]);
  EXPECT_THROW(std::rethrow_exception(errors[1]), CollectiveMismatch);
  const std::string m = message(errors[1]);
  EXPECT_NE(m.find("allreduce #2 (f32 sum, 4 elements)"), std::string::npos) << m;
  EXPECT_NE(m.find("broadcast #2 (f32, 4 elements, root 0)"), std::string::npos) << m;
  ASSERT_TRUE(errors[0]);  // rank 0 learns it too, or sees rank 1 gone
  EXPECT_NE(message(errors[0]).find("rank 1"), std::string::npos) << message(errors[0]);
}

// Point-to-point matches by tag alone: signatures of p2p calls are not compared.
TEST(InprocTransport, PointToPointIgnoresSignature) {
  auto errors = run_transports(2, [&](int r, const std::shared_ptr<Transport>& t) {
    int v = r;
    if (r == 0) t->send(1, tag(1), p2p(4), &v, 4, soon());
    CallSignature other = p2p(4);
    other.dtype = DType::i32;
    if (r == 1) t->recv(0, tag(1), other, &v, 4, soon());
    EXPECT_EQ(v, 0);
  });
  rethrow_first(errors);
}

TEST(InprocTransport, DeadPeerFailsWaitsNamingIt) {
  std::latch closed(1);
  auto errors = run_transports(3, [&](int r, const std::shared_ptr<Transport>& t) {
    if (r == 2) {
      static_cast<InprocTransport&>(*t).close("simulated crash");
      closed.count_down();
      return;
    }
    closed.wait();
    int v = 0;
    if (r == 0) t->recv(2, tag(1), p2p(4), &v, 4, Deadline::after(30s));
    if (r == 1) t->send(2, tag(1), p2p(4), &v, 4, Deadline::after(30s));
  });
  EXPECT_FALSE(errors[2]);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[static_cast<size_t>(r)]);
    EXPECT_THROW(std::rethrow_exception(errors[static_cast<size_t>(r)]), PeerError);
    const std::string m = message(errors[static_cast<size_t>(r)]);
    EXPECT_NE(m.find("peer rank 2 is gone (simulated crash)"), std::string::npos) << m;
  }
}

// What a peer sent before it died can still be received.
TEST(InprocTransport, BufferedMessagesOfADeadPeerArrive) {
  std::latch closed(1);
  auto errors = run_transports(2, [&](int r, const std::shared_ptr<Transport>& t) {
    int v = 11;
    if (r == 1) {
      t->send(0, tag(1), p2p(4), &v, 4, soon());  // completes by buffering
      static_cast<InprocTransport&>(*t).close();
      closed.count_down();
      return;
    }
    closed.wait();
    v = 0;
    t->recv(1, tag(1), p2p(4), &v, 4, soon());
    EXPECT_EQ(v, 11);
    EXPECT_THROW(t->recv(1, tag(2), p2p(4), &v, 4, soon()), PeerError);
  });
  rethrow_first(errors);
}

TEST(InprocTransport, DeadlineNamesPeerCallAndTime) {
  std::latch done(1);
  auto errors = run_transports(2, [&](int r, const std::shared_ptr<Transport>& t) {
    if (r == 1) return done.wait();  // alive, but never sends
    float v[4];
    try {
      t->recv(1, tag(0, 5), collective(CallKind::allreduce, 4), v, 16, Deadline::after(50ms));
    } catch (...) {
      done.count_down();
      throw;
    }
  });
  ASSERT_TRUE(errors[0]);
  EXPECT_THROW(std::rethrow_exception(errors[0]), TimeoutError);
  const std::string m = message(errors[0]);
  EXPECT_NE(m.find("timed out after"), std::string::npos) << m;
  EXPECT_NE(m.find("from rank 1 in allreduce #5 (f32 sum, 4 elements)"), std::string::npos) << m;
}

TEST(InprocTransport, BufferBoundFailsNamingPeer) {
  std::latch done(1);
  auto errors = run_transports(
      2,
      [&](int r, const std::shared_ptr<Transport>& t) {
        if (r == 1) return done.wait();  // never receives
        std::vector<char> a(600), b(600);
        try {
          t->send(1, tag(1), p2p(600), a.data(), 600, soon());  // fits in 1000
          t->send(1, tag(2), p2p(600), b.data(), 600, soon());  // would not
        } catch (...) {
          done.count_down();
          throw;
        }
      },
      1000);
  ASSERT_TRUE(errors[0]);
  EXPECT_THROW(std::rethrow_exception(errors[0]), IoError);
  const std::string m = message(errors[0]);
  EXPECT_NE(m.find("sent to rank 1"), std::string::npos) << m;
  EXPECT_NE(m.find("limit of 1000 bytes"), std::string::npos) << m;
}

// After an error a rank is closed, and its peers are told why.
TEST(InprocTransport, ErrorsSpreadToPeers) {
  auto errors = run_transports(3, [&](int r, const std::shared_ptr<Transport>& t) {
    int v = 0;
    if (r == 0) t->recv(1, tag(1), p2p(4), &v, 4, Deadline::after(10ms));  // times out
    if (r == 2) t->recv(0, tag(1), p2p(4), &v, 4, Deadline::after(30s));
  });
  ASSERT_TRUE(errors[2]);
  EXPECT_THROW(std::rethrow_exception(errors[2]), PeerError);
  const std::string m = message(errors[2]);
  EXPECT_NE(m.find("peer rank 0 is gone"), std::string::npos) << m;
  EXPECT_NE(m.find("timed out"), std::string::npos) << m;
}

}  // namespace
}  // namespace braid::comm
