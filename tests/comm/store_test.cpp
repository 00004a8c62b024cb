// The Store contract, run against MemoryStore and the TCP store (StoreServer +
// connect_store), then the TCP server's defences: wrong secrets, unauthenticated and
// malformed requests, clients that vanish, and a server that stops. Ranks are threads.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "comm/auth.h"
#include "comm/memory_store.h"
#include "comm/socket.h"
#include "comm/store_protocol.h"
#include "comm/store_server.h"
#include "comm/tcp_store.h"
#include "core/error.h"

namespace braid::comm {
namespace {

using namespace std::chrono_literals;

Deadline soon() { return Deadline::after(60s); }
Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
bool contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

// ---- The contract, for every implementation -------------------------------------------

class StoreContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "memory") {
      store_ = std::make_shared<MemoryStore>();
      return;
    }
    secret_ = Secret::generate();
    server_ = std::make_unique<StoreServer>(StoreServerOptions{"127.0.0.1", 0, secret_});
    store_ = connect_store("127.0.0.1", server_->port(), secret_, soon());
  }
  // Another handle on the same store, as another rank would have.
  std::shared_ptr<Store> another() {
    if (!server_) return store_;
    return connect_store("127.0.0.1", server_->port(), secret_, soon());
  }

  Secret secret_;
  std::unique_ptr<StoreServer> server_;
  std::shared_ptr<Store> store_;
};

TEST_P(StoreContract, SetThenGetReturnsTheLatestValue) {
  store_->set("a", std::string("1"));
  EXPECT_EQ(store_->get_string("a", soon()), "1");
  store_->set("a", std::string("two"));
  EXPECT_EQ(store_->get_string("a", soon()), "two");
  const Bytes binary{0, 1, 255, 0, 7};
  store_->set("bin", binary);
  EXPECT_EQ(store_->get("bin", soon()), binary);
  store_->set("empty", Bytes{});
  EXPECT_EQ(store_->get("empty", soon()), Bytes{});
  EXPECT_EQ(another()->get_string("a", soon()), "two");
}

TEST_P(StoreContract, LargeValuesRoundTrip) {
  Bytes big(3 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 131);
  store_->set("big", big);
  EXPECT_EQ(another()->get("big", soon()), big);
}

TEST_P(StoreContract, GetWaitsForASetFromAnotherThread) {
  Bytes got;
  std::thread reader([&] { got = store_->get("late", soon()); });
  store_->set("late", std::string("here"));  // same handle: must not wait behind the get
  reader.join();
  EXPECT_EQ(got, bytes("here"));
}

TEST_P(StoreContract, WaitReturnsOnceEveryKeyIsSet) {
  const std::vector<std::string> keys = {"w0", "w1", "w2"};
  std::thread waiter([&] { store_->wait(keys, soon()); });
  auto other = another();
  for (const auto& k : keys) other->set(k, std::string("x"));
  waiter.join();
  store_->wait(keys, Deadline::after(0ms));  // all present: no wait at all
  store_->wait(std::span<const std::string>(), Deadline::after(0ms));
}

TEST_P(StoreContract, ConcurrentAddsSumExactlyAndEachResultIsUnique) {
  constexpr int kThreads = 8, kAdds = 100;
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      auto store = t % 2 ? another() : store_;  // shared and separate handles both
      for (int i = 0; i < kAdds; ++i) seen[t].push_back(store->add("counter", 1));
    });
  for (auto& t : threads) t.join();
  std::set<int64_t> all;
  for (const auto& s : seen) all.insert(s.begin(), s.end());
  EXPECT_EQ(all.size(), size_t{kThreads * kAdds});
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kThreads * kAdds);
  EXPECT_EQ(store_->add("counter", 0), kThreads * kAdds);
  EXPECT_EQ(store_->add("counter", -kThreads * kAdds - 5), -5);
  EXPECT_EQ(store_->get_string("counter", soon()), "-5");
}

TEST_P(StoreContract, AddOnANonIntegerIsAnErrorAndLeavesTheValue) {
  store_->set("text", std::string("hello"));
  try {
    store_->add("text", 1);
    ADD_FAILURE();
  } catch (const TimeoutError&) {
    ADD_FAILURE();
  } catch (const IoError&) {
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "'text'")) << e.what();
  }
  EXPECT_EQ(store_->get_string("text", soon()), "hello");
  EXPECT_EQ(store_->add("fresh", 0), 0);  // the handle still works
}

TEST_P(StoreContract, CompareSetSwapsOnlyOnAMatch) {
  const Bytes none;
  // Absent key: an empty `expected` matches.
  EXPECT_EQ(store_->compare_set("cas", none, bytes("v1")), bytes("v1"));
  // Present key, wrong expectation: unchanged, the current value comes back.
  EXPECT_EQ(store_->compare_set("cas", bytes("nope"), bytes("v2")), bytes("v1"));
  EXPECT_EQ(store_->compare_set("cas", none, bytes("v2")), bytes("v1"));
  // Right expectation: swapped.
  EXPECT_EQ(store_->compare_set("cas", bytes("v1"), bytes("v2")), bytes("v2"));
  EXPECT_EQ(store_->get_string("cas", soon()), "v2");
  // Absent key, non-empty expectation: stays absent.
  EXPECT_EQ(store_->compare_set("absent", bytes("x"), bytes("y")), none);
  EXPECT_THROW(store_->get("absent", Deadline::after(0ms)), TimeoutError);
}

TEST_P(StoreContract, CompareSetElectsExactlyOneWinner) {
  constexpr int kThreads = 6;
  std::atomic<int> winners{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      const Bytes mine = bytes("rank" + std::to_string(t));
      if (store_->compare_set("leader", Bytes{}, mine) == mine) ++winners;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(winners.load(), 1);
}

TEST_P(StoreContract, WaitTimeoutNamesTheMissingKey) {
  store_->set("present", std::string("1"));
  const std::vector<std::string> keys = {"present", "missing-key"};
  try {
    store_->wait(keys, Deadline::after(30ms));
    ADD_FAILURE();
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(contains(e.what(), "'missing-key'")) << e.what();
    EXPECT_TRUE(contains(e.what(), " s ")) << e.what();  // the time waited
  }
  try {
    store_->get("never-set", Deadline::after(0ms));
    ADD_FAILURE();
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(contains(e.what(), "'never-set'")) << e.what();
  }
  EXPECT_EQ(store_->get_string("present", soon()), "1");  // still usable after timeouts
}

TEST_P(StoreContract, RemoveDeletesOnce) {
  store_->set("gone", std::string("x"));
  EXPECT_TRUE(store_->remove("gone"));
  EXPECT_FALSE(store_->remove("gone"));
  EXPECT_THROW(store_->get("gone", Deadline::after(0ms)), TimeoutError);
  EXPECT_EQ(store_->add("gone", 2), 2);  // absent counts as 0 again
}

TEST_P(StoreContract, PrefixedViewsDoNotCollide) {
  auto a = prefixed(store_, "group-a");
  auto b = prefixed(store_, "group-b");
  a->set("k", std::string("A"));
  b->set("k", std::string("B"));
  EXPECT_EQ(a->get_string("k", soon()), "A");
  EXPECT_EQ(b->get_string("k", soon()), "B");
  EXPECT_EQ(store_->get_string("group-a/k", soon()), "A");
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreContract, ::testing::Values("memory", "tcp"),
                         [](const auto& info) { return info.param; });

// ---- The TCP server's defences ----------------------------------------------------------

class TcpStore : public ::testing::Test {
 protected:
  void SetUp() override {
    secret_ = Secret::generate();
    server_ = std::make_unique<StoreServer>(StoreServerOptions{"127.0.0.1", 0, secret_});
  }
  std::shared_ptr<Store> client() {
    return connect_store("127.0.0.1", server_->port(), secret_, soon());
  }
  // A connection that has authenticated, for sending hand-made bytes.
  Socket authenticated() {
    Socket s = connect_tcp("127.0.0.1", server_->port(), soon());
    s.set_nodelay();
    authenticate(s, secret_, AuthRole::client, kStoreAuthPurpose, soon());
    return s;
  }
  // True when the server closes `s` (EOF or reset) before the deadline.
  static bool closed_by_server(const Socket& s) {
    uint8_t buf[256];
    try {
      for (;;) s.read_exact(buf, 1, soon(), "waiting for the server to close");
    } catch (const TimeoutError&) {
      return false;
    } catch (const IoError&) {
      return true;
    }
  }
  // The server still serves everyone else, and nothing was stored.
  void expect_healthy_and_untouched() {
    auto store = client();
    store->set("probe", std::string("ok"));
    EXPECT_EQ(store->get_string("probe", soon()), "ok");
    EXPECT_THROW(store->get("k", Deadline::after(0ms)), TimeoutError);
  }

  Secret secret_;
  std::unique_ptr<StoreServer> server_;
};

TEST_F(TcpStore, AddressNamesTheBoundPort) {
  EXPECT_EQ(server_->address(), "127.0.0.1:" + std::to_string(server_->port()));
  EXPECT_NE(server_->port(), 0);
}

TEST_F(TcpStore, EmptySecretIsRefusedOnBothSides) {
  EXPECT_THROW(StoreServer(StoreServerOptions{"127.0.0.1", 0, Secret()}), Error);
  EXPECT_THROW(connect_store("127.0.0.1", server_->port(), Secret(), soon()), Error);
}

TEST_F(TcpStore, WrongSecretIsAnAuthErrorAndTheServerKeepsServing) {
  try {
    connect_store("127.0.0.1", server_->port(), Secret::generate(), soon());
    ADD_FAILURE();
  } catch (const AuthError& e) {
    EXPECT_TRUE(contains(e.what(), "secret")) << e.what();
  }
  expect_healthy_and_untouched();
}

TEST_F(TcpStore, ARequestWithoutAuthenticationIsNeverParsed) {
  Socket raw = connect_tcp("127.0.0.1", server_->port(), soon());
  // A well-formed set of "k", longer than a hello, sent in place of the handshake.
  const Bytes request = encode_request({StoreOp::set, {"k"}, {Bytes(100, 'v')}});
  raw.write_all(request.data(), request.size(), soon(), "raw request");
  EXPECT_TRUE(closed_by_server(raw));
  expect_healthy_and_untouched();
}

TEST_F(TcpStore, AShortUnauthenticatedRequestThenHangUpIsDropped) {
  {
    Socket raw = connect_tcp("127.0.0.1", server_->port(), soon());
    const Bytes request = encode_request({StoreOp::set, {"k"}, {bytes("v")}});
    raw.write_all(request.data(), request.size(), soon(), "raw request");
  }
  expect_healthy_and_untouched();
}

TEST_F(TcpStore, ASilentConnectionDoesNotBlockOthers) {
  Socket silent = connect_tcp("127.0.0.1", server_->port(), soon());
  Socket half = connect_tcp("127.0.0.1", server_->port(), soon());
  const uint8_t part[10] = {'B', 'R', 'D'};
  half.write_all(part, sizeof(part), soon(), "half a hello");
  expect_healthy_and_untouched();
}

TEST_F(TcpStore, GarbageAfterAuthenticationDisconnectsOnlyThatClient) {
  auto good = client();
  good->set("before", std::string("1"));
  {
    Socket s = authenticated();
    const uint8_t junk[] = {5, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef, 0x00};
    s.write_all(junk, sizeof(junk), soon(), "garbage");
    EXPECT_TRUE(closed_by_server(s));
  }
  EXPECT_EQ(good->get_string("before", soon()), "1");
  expect_healthy_and_untouched();
}

TEST_F(TcpStore, AnOversizedLengthIsRefusedBeforeItsBodyArrives) {
  Socket s = authenticated();
  const uint8_t huge[] = {0xff, 0xff, 0xff, 0xff};
  s.write_all(huge, sizeof(huge), soon(), "oversized");
  EXPECT_TRUE(closed_by_server(s));  // without the 4 GiB ever being sent
  expect_healthy_and_untouched();
}

TEST_F(TcpStore, AnOversizedKeyIsRefused) {
  Socket s = authenticated();
  Bytes m = encode_request({StoreOp::remove, {"k"}, {}});
  // Rewrite the key's size field (after prefix, op, timeout, delta, key count).
  const size_t at = 4 + 1 + 8 + 8 + 4;
  const uint32_t size = kMaxStoreKeyBytes + 1;
  for (int i = 0; i < 4; ++i) m[at + i] = static_cast<uint8_t>(size >> (8 * i));
  s.write_all(m.data(), m.size(), soon(), "oversized key");
  EXPECT_TRUE(closed_by_server(s));
  expect_healthy_and_untouched();
}

TEST_F(TcpStore, AClientThatHangsUpMidRequestChangesNothing) {
  {
    Socket s = authenticated();
    const Bytes m = encode_request({StoreOp::set, {"k"}, {Bytes(1000, 'v')}});
    s.write_all(m.data(), m.size() / 2, soon(), "half a request");
  }
  expect_healthy_and_untouched();
}

TEST_F(TcpStore, AClientThatHangsUpWhileWaitingIsForgotten) {
  {
    Socket s = authenticated();
    const Bytes m = encode_request({StoreOp::get, {"k"}, {}, 0, -1});
    s.write_all(m.data(), m.size(), soon(), "parked get");
  }
  auto store = client();
  store->set("k", std::string("now"));  // wakes no one, crashes nothing
  EXPECT_EQ(store->get_string("k", soon()), "now");
}

TEST_F(TcpStore, AnOversizedValueIsAnErrorBeforeSending) {
  auto store = client();
  const Bytes big(kMaxStoreValueBytes + 1);
  EXPECT_THROW(store->set("big", big), Error);
  store->set("small", std::string("ok"));  // the connection is intact
  EXPECT_EQ(store->get_string("small", soon()), "ok");
}

TEST_F(TcpStore, StoppedServerTurnsCallsIntoIoErrorsPromptly) {
  auto store = client();
  auto waiting = client();
  std::exception_ptr waiter_error;
  std::thread waiter([&] {
    try {
      waiting->get("never", soon());
    } catch (...) {
      waiter_error = std::current_exception();
    }
  });
  store->set("x", std::string("1"));
  server_->stop();
  server_->stop();  // idempotent
  waiter.join();
  // An IoError, not a TimeoutError at the 60 s deadline: the loss was noticed at once.
  try {
    std::rethrow_exception(waiter_error);
  } catch (const IoError& e) {
    EXPECT_FALSE(dynamic_cast<const TimeoutError*>(&e));
  } catch (const std::exception& e) {
    ADD_FAILURE() << "waiter threw " << e.what();
  }
  try {
    store->get("x", soon());
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_TRUE(contains(e.what(), "127.0.0.1:")) << e.what();
  }
  EXPECT_THROW(store->set("y", std::string("2")), IoError);
  EXPECT_THROW(connect_store("127.0.0.1", server_->port(), secret_, Deadline::after(50ms)),
               TimeoutError);
}

TEST_F(TcpStore, ManyClientsRendezvous) {
  constexpr int kRanks = 16;
  std::vector<std::thread> ranks;
  std::vector<std::string> seen(kRanks);
  for (int r = 0; r < kRanks; ++r)
    ranks.emplace_back([&, r] {
      auto store = client();
      store->set("addr/" + std::to_string(r), "host" + std::to_string(r));
      store->add("arrived", 1);
      std::vector<std::string> keys;
      for (int p = 0; p < kRanks; ++p) keys.push_back("addr/" + std::to_string(p));
      store->wait(keys, soon());
      seen[r] = store->get_string("addr/" + std::to_string((r + 1) % kRanks), soon());
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(seen[r], "host" + std::to_string((r + 1) % kRanks));
  EXPECT_EQ(client()->add("arrived", 0), kRanks);
}

}  // namespace
}  // namespace braid::comm
