// The TCP transport with real processes and real faults: forked ranks, a peer killed with
// SIGKILL, wrong secrets, and a raw authenticated socket sending corrupt, oversized and
// truncated frames. Also connect_transport()'s choice of transport. The shared contract
// is in transport_contract_test.cpp.
#include "comm/tcp_transport.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstdlib>

#include "comm/auth.h"
#include "comm/frame.h"
#include "comm/socket.h"
#include "comm/transport_factory.h"
#include "transport_test_util.h"

namespace braid::comm {
namespace {

using namespace testing;

CallSignature sig_of(CallKind call, uint64_t count) {
  CallSignature s;
  s.call = call;
  s.count = count;
  return s;
}

void exchange(Transport& t) {
  const int n = t.size(), me = t.rank();
  const int right = (me + 1) % n, left = (me + n - 1) % n;
  const size_t count = 500'000;
  std::vector<float> out(count, static_cast<float>(me + 1)), acc(count, 0.25f);
  for (uint32_t step = 0; step < 3; ++step) {
    const RequestId ids[] = {
        t.isend(right, {1, 1, step}, sig_of(CallKind::allreduce, count), out.data(), count * 4),
        t.irecv(left, {1, 1, step}, sig_of(CallKind::allreduce, count), acc.data(), count * 4,
                Reduction{DType::f32, ReduceOp::sum})};
    t.wait(ids, soon());
  }
  for (size_t i = 0; i < count; i += 4099)
    require(acc[i] == 0.25f + 3.0f * static_cast<float>(left + 1), "reduced value");
  for (int p = 0; p < n; ++p) {
    const auto out_bytes = pattern(me * 10 + p, 1000 * static_cast<size_t>(p + 1));
    std::vector<uint8_t> in(1000 * static_cast<size_t>(me + 1));
    const RequestId ids[] = {
        t.isend(p, {1, 0, 2}, sig_of(CallKind::p2p, out_bytes.size()), out_bytes.data(),
                out_bytes.size()),
        t.irecv(p, {1, 0, 2}, sig_of(CallKind::p2p, in.size()), in.data(), in.size())};
    t.wait(ids, soon());
    require(in == pattern(p * 10 + me, in.size()), "bytes from rank " + std::to_string(p));
  }
}

TEST(TcpTransport, ForkedProcessesExchangeAndReduce) {
  const int n = 3;
  ForkedRanks ranks(n, [](int rank, Store& store) {
    auto t = connect_tcp_transport(store, rank, n, test_secret(), soon());
    exchange(*t);
  });
  auto t = connect_tcp_transport(ranks.store(), 0, n, test_secret(), soon());
  EXPECT_EQ(t->name(), "tcp");
  exchange(*t);
  EXPECT_TRUE(ranks.join());
}

TEST(TcpTransport, AKilledPeerFailsTheWaitWithPeerErrorNamingIt) {
  ForkedRanks ranks(2, [](int rank, Store& store) {
    auto t = connect_tcp_transport(store, rank, 2, test_secret(), soon());
    uint32_t hello = 9, never = 0;
    t->send(0, {1, 0, 1}, sig_of(CallKind::p2p, 4), &hello, 4, soon());
    t->recv(0, {1, 0, 2}, sig_of(CallKind::p2p, 4), &never, 4, soon());  // killed in here
  });
  auto t = connect_tcp_transport(ranks.store(), 0, 2, test_secret(), soon());
  uint32_t got = 0;
  t->recv(1, {1, 0, 1}, sig_of(CallKind::p2p, 4), &got, 4, soon());
  EXPECT_EQ(got, 9u);
  ranks.kill(1);
  try {
    t->recv(1, {1, 4, 0}, sig_of(CallKind::allreduce, 1), &got, 4, soon());
    FAIL() << "no PeerError";
  } catch (const PeerError& e) {
    EXPECT_TRUE(contains(e.what(), "rank 1")) << e.what();
    EXPECT_TRUE(contains(e.what(), "allreduce #4")) << e.what();
  }
}

TEST(TcpTransport, ARankWithTheWrongSecretIsRefused) {
  MemoryStore store;
  std::string server_error, client_error;
  run_threads(2, [&](int r) {
    try {
      const Secret secret = r == 0 ? test_secret() : Secret::from_hex(std::string(64, '6'));
      connect_tcp_transport(store, r, 2, secret, Deadline::after(r == 0 ? 1s : 20s));
    } catch (const AuthError& e) {
      (r == 0 ? server_error : client_error) = std::string("AuthError: ") + e.what();
    } catch (const TimeoutError& e) {
      (r == 0 ? server_error : client_error) = std::string("TimeoutError: ") + e.what();
    }
  });
  EXPECT_TRUE(contains(client_error, "AuthError")) << client_error;
  EXPECT_TRUE(contains(client_error, "secret")) << client_error;
  // The listener refuses the stranger and keeps waiting for the real rank 1.
  EXPECT_TRUE(contains(server_error, "TimeoutError")) << server_error;
}

// Rank 0 of a job of two, connecting on a thread; the test plays rank 1 by hand.
class FakeRankOne : public ::testing::Test {
 protected:
  void SetUp() override {
    rank0_ = std::thread([this] {
      try {
        t_ = connect_tcp_transport(store_, 0, 2, test_secret(), soon());
      } catch (const std::exception& e) {
        error_ = e.what();
      }
    });
    address_ = parse_host_port(store_.get_string("tcp/addr/0", soon()));
  }
  void TearDown() override {
    if (rank0_.joinable()) rank0_.join();
  }
  Socket connect_as_rank_one(const Secret& secret = test_secret()) {
    Socket s = connect_tcp(address_.host, address_.port, soon());
    authenticate(s, secret, AuthRole::client, "tcp-transport", soon());
    const uint32_t hello[4] = {0x48545242, 1, 2, 0};
    s.write_all(hello, sizeof(hello), soon(), "hello");
    uint32_t back[4];
    s.read_exact(back, sizeof(back), soon(), "hello back");
    rank0_.join();
    EXPECT_TRUE(t_) << error_;
    return s;
  }
  // What rank 0's next receive from rank 1 throws.
  std::string receive_error() {
    uint32_t x = 0;
    try {
      t_->recv(1, {1, 0, 0}, sig_of(CallKind::p2p, 4), &x, 4, soon());
    } catch (const PeerError& e) {
      return e.what();
    }
    return "no PeerError";
  }

  MemoryStore store_;
  std::thread rank0_;
  std::shared_ptr<Transport> t_;
  std::string error_;
  HostPort address_;
};

TEST_F(FakeRankOne, AnIntruderWithTheWrongSecretIsRefusedAndTheJobGoesOn) {
  {
    Socket intruder = connect_tcp(address_.host, address_.port, soon());
    EXPECT_THROW(authenticate(intruder, Secret::from_hex(std::string(64, '7')), AuthRole::client,
                              "tcp-transport", soon()),
                 AuthError);
  }
  Socket s = connect_as_rank_one();
  FrameHeader h;
  h.tag = {1, 0, 0};
  h.sig = sig_of(CallKind::p2p, 4);
  h.bytes = 4;
  const uint32_t value = 1234;
  s.write_all(&h, sizeof(h), soon(), "frame");
  s.write_all(&value, 4, soon(), "payload");
  uint32_t got = 0;
  t_->recv(1, {1, 0, 0}, sig_of(CallKind::p2p, 4), &got, 4, soon());
  EXPECT_EQ(got, 1234u);
}

TEST_F(FakeRankOne, ABadMagicIsAPeerErrorNamingTheRank) {
  Socket s = connect_as_rank_one();
  FrameHeader h;
  h.magic = 0x12345678;
  s.write_all(&h, sizeof(h), soon(), "frame");
  const std::string what = receive_error();
  EXPECT_TRUE(contains(what, "rank 1")) << what;
  EXPECT_TRUE(contains(what, "magic")) << what;
}

TEST_F(FakeRankOne, AnAbsurdPayloadSizeIsRefusedBeforeAllocating) {
  Socket s = connect_as_rank_one();
  FrameHeader h;
  h.bytes = uint64_t{1} << 62;
  s.write_all(&h, sizeof(h), soon(), "frame");
  const std::string what = receive_error();
  EXPECT_TRUE(contains(what, "rank 1")) << what;
  EXPECT_TRUE(contains(what, "exceeds")) << what;
}

TEST_F(FakeRankOne, AnEarlyMessagePastTheBufferBoundIsRefusedBeforeAllocating) {
  Socket s = connect_as_rank_one();
  FrameHeader h;
  h.tag = {1, 0, 9};  // nobody receives this tag
  h.bytes = uint64_t{100} << 30;
  s.write_all(&h, sizeof(h), soon(), "frame");
  const std::string what = receive_error();
  EXPECT_TRUE(contains(what, "rank 1")) << what;
  EXPECT_TRUE(contains(what, "max_buffered_bytes")) << what;
}

TEST_F(FakeRankOne, ClosingMidPayloadIsAPeerError) {
  Socket s = connect_as_rank_one();
  FrameHeader h;
  h.tag = {1, 0, 9};
  h.bytes = uint64_t{200} << 20;  // within the bound: buffered as it arrives, then cut off
  s.write_all(&h, sizeof(h), soon(), "frame");
  s.write_all("0123456789", 10, soon(), "payload");
  s.close();
  const std::string what = receive_error();
  EXPECT_TRUE(contains(what, "rank 1")) << what;
  EXPECT_TRUE(contains(what, "middle of a message")) << what;
}

TEST_F(FakeRankOne, ClosingMidHeaderIsAPeerError) {
  Socket s = connect_as_rank_one();
  FrameHeader h;
  s.write_all(&h, 20, soon(), "half a frame");
  s.close();
  const std::string what = receive_error();
  EXPECT_TRUE(contains(what, "rank 1")) << what;
  EXPECT_TRUE(contains(what, "closed")) << what;
}

TEST_F(FakeRankOne, AGoodbyeFailsLaterWaitsSayingThePeerClosed) {
  Socket s = connect_as_rank_one();
  FrameHeader h;
  h.type = FrameType::goodbye;
  s.write_all(&h, sizeof(h), soon(), "goodbye");
  const std::string what = receive_error();
  EXPECT_TRUE(contains(what, "rank 1 closed")) << what;
}

// Only options count (launch/ turns BRAID_IFACE_ADDR and the store's host into them).
TEST(TcpAdvertiseHost, PrefersTheOptionThenTheListenAddressThenTheRouteToTheProbeHost) {
  TransportOptions o;
  o.advertise_host = "10.1.2.3";
  o.route_probe_host = "127.0.0.1";
  EXPECT_EQ(tcp_advertise_host(o), "10.1.2.3");
  o.advertise_host.clear();
  o.listen_host = "127.0.0.5";
  EXPECT_EQ(tcp_advertise_host(o), "127.0.0.5");
  o.listen_host = "0.0.0.0";
  o.route_probe_host = "127.0.0.9";
  EXPECT_EQ(tcp_advertise_host(o), "127.0.0.1");  // the route to a loopback host leaves from lo
  o.route_probe_host.clear();
  EXPECT_EQ(tcp_advertise_host(o), "127.0.0.1");
}

TEST(ConnectTransport, AutomaticPicksShmOnOneHostAndTheKindsParse) {
  for (const auto& [kind, name] :
       {std::pair{TransportKind::automatic, "shm"}, std::pair{TransportKind::shm, "shm"},
        std::pair{TransportKind::tcp, "tcp"}}) {
    World w = connect_world(
        [kind = kind](Store& s, int r, int n) {
          return connect_transport(kind, s, r, n, test_secret(), soon());
        },
        2);
    EXPECT_EQ(w[0]->name(), name);
    uint32_t v = 5, got = 0;
    w[0]->send(1, {0, 0, 0}, sig_of(CallKind::p2p, 4), &v, 4, soon());
    w[1]->recv(0, {0, 0, 0}, sig_of(CallKind::p2p, 4), &got, 4, soon());
    EXPECT_EQ(got, 5u);
  }
  EXPECT_EQ(parse_transport_kind("auto"), TransportKind::automatic);
  EXPECT_EQ(parse_transport_kind("tcp"), TransportKind::tcp);
  EXPECT_EQ(transport_kind_name(TransportKind::shm), "shm");
  try {
    parse_transport_kind("ib");
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "'ib'")) << e.what();
    EXPECT_TRUE(contains(e.what(), "auto, shm or tcp")) << e.what();
  }
}

TEST(ConnectTransport, AutomaticPicksTcpWhenAHostDiffers) {
  MemoryStore store;
  store.set("host/1", std::string("elsewhere/another-boot"));
  // Rank 1 exists only as a host record, so the rendezvous times out; the keys rank 0
  // published show which transport it chose.
  EXPECT_THROW(connect_transport(TransportKind::automatic, store, 0, 2, test_secret(),
                                 Deadline::after(200ms)),
               TimeoutError);
  EXPECT_NO_THROW(store.get_string("tcp/addr/0", Deadline::after(1s)));
  EXPECT_THROW(store.get_string("shm/seg/0", Deadline::after(0ms)), TimeoutError);
}

}  // namespace
}  // namespace braid::comm
