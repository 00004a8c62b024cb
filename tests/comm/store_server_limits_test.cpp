// What a client of the TCP store can cost its server, over real sockets: an announced
// request length costs memory only as its bytes arrive, up to a per-connection cap that
// drops the client with a warning naming it and the limit; warnings about misbehaving
// clients come at most once per interval, with a count of what was held back.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "comm/auth.h"
#include "comm/log_capture.h"
#include "comm/socket.h"
#include "comm/store_protocol.h"
#include "comm/store_server.h"
#include "comm/tcp_store.h"
#include "core/error.h"

namespace braid::comm {
namespace {

using namespace std::chrono_literals;
using braid::testing::LogCapture;

Deadline soon() { return Deadline::after(60s); }

Socket authenticated(const StoreServer& server, const Secret& secret) {
  Socket s = connect_tcp("127.0.0.1", server.port(), soon());
  s.set_nodelay();
  authenticate(s, secret, AuthRole::client, kStoreAuthPurpose, soon());
  return s;
}

// True when the server closes `s` (EOF or reset) before the deadline.
bool closed_by_server(const Socket& s) {
  uint8_t buf[1];
  try {
    for (;;) s.read_exact(buf, 1, soon(), "waiting for the server to close");
  } catch (const TimeoutError&) {
    return false;
  } catch (const IoError&) {
    return true;
  }
}

void send_length(const Socket& s, uint32_t length) {
  uint8_t prefix[kStoreLengthBytes];
  for (size_t i = 0; i < kStoreLengthBytes; ++i)
    prefix[i] = static_cast<uint8_t>(length >> (8 * i));
  s.write_all(prefix, sizeof(prefix), soon(), "length prefix");
}

// Warnings about one dropped client each (summaries of held-back ones also quote the last).
size_t single_drops(const LogCapture& log) {
  size_t n = 0;
  for (const auto& line : log.matching({"W ", "dropping client"}))
    n += line.find("more warning") == std::string::npos;
  return n;
}

void expect_serving(const StoreServer& server, const Secret& secret) {
  auto store = connect_store("127.0.0.1", server.port(), secret, soon());
  store->set("probe", std::string("ok"));
  EXPECT_EQ(store->get_string("probe", soon()), "ok");
}

TEST(StoreServerLimits, AnAnnouncedLengthCostsOnlyTheBytesThatArrive) {
  const Secret secret = Secret::generate();
  StoreServer server(StoreServerOptions{"127.0.0.1", 0, secret});
  // Eight connections each announce the largest request the server accepts (128 MiB),
  // then send ten bytes of it and stall: before, each buffer was that size at once (1 GiB).
  std::vector<Socket> stalled;
  for (int i = 0; i < 8; ++i) {
    stalled.push_back(authenticated(server, secret));
    send_length(stalled.back(), static_cast<uint32_t>(kMaxStoreRequestBytes));
    const uint8_t some[10] = {1};
    stalled.back().write_all(some, sizeof(some), soon(), "the start of a body");
  }
  // Everyone else is still served, and by then the server has read the stalled bytes
  // (they were sent before this client connected).
  expect_serving(server, secret);
  EXPECT_LE(server.receive_buffer_high_water(), size_t{1} << 20)
      << "an announced length was allocated before its bytes arrived";
  // A body that does arrive grows its buffer with it, and is served.
  const Bytes big = encode_request({StoreOp::set, {"big"}, {Bytes(3 << 20, 7)}});
  Socket s = authenticated(server, secret);
  s.write_all(big.data(), big.size(), soon(), "a 3 MiB set");
  uint8_t prefix[kStoreLengthBytes];
  s.read_exact(prefix, sizeof(prefix), soon(), "the set's answer");
  EXPECT_GE(server.receive_buffer_high_water(), size_t{3} << 20);
  EXPECT_LE(server.receive_buffer_high_water(), size_t{8} << 20);
}

TEST(StoreServerLimits, ALengthOverThePerConnectionCapDropsThatClientNamingItAndTheLimit) {
  const Secret secret = Secret::generate();
  StoreServerOptions options{"127.0.0.1", 0, secret};
  options.max_request_bytes = 4096;
  StoreServer server(options);
  LogCapture log;
  Socket s = authenticated(server, secret);
  const std::string peer = "127.0.0.1:" + std::to_string(s.local_port());
  send_length(s, 4097);
  EXPECT_TRUE(closed_by_server(s));
  expect_serving(server, secret);
  const auto warnings = log.matching({"W ", peer, "4097", "4096", "max_request_bytes"});
  EXPECT_EQ(warnings.size(), 1u) << log.text();
  // A request within the cap is served on a fresh connection.
  auto store = connect_store("127.0.0.1", server.port(), secret, soon());
  store->set("k", Bytes(3000, 1));
  EXPECT_EQ(store->get("k", soon()).size(), 3000u);
}

TEST(StoreServerLimits, DroppedClientsAreWarnedAboutOncePerIntervalWithACount) {
  const Secret secret = Secret::generate();
  LogCapture log;
  constexpr int kIntruders = 20;
  {
    StoreServer server(StoreServerOptions{"127.0.0.1", 0, secret});  // one warning a minute
    for (int i = 0; i < kIntruders; ++i) {
      // Each sends a request in place of the handshake, and is dropped.
      Socket raw = connect_tcp("127.0.0.1", server.port(), soon());
      const Bytes request = encode_request({StoreOp::set, {"k"}, {Bytes(100, 'v')}});
      raw.write_all(request.data(), request.size(), soon(), "raw request");
      ASSERT_TRUE(closed_by_server(raw));
    }
    expect_serving(server, secret);
  }  // stopping says what was held back
  EXPECT_EQ(single_drops(log), 1u) << log.text();
  const auto summary = log.matching({"W ", std::to_string(kIntruders - 1) + " more warnings"});
  EXPECT_EQ(summary.size(), 1u) << log.text();
  EXPECT_EQ(log.matching({"W "}).size(), 2u) << log.text();
}

TEST(StoreServerLimits, HeldBackWarningsAreCountedOncePerInterval) {
  const Secret secret = Secret::generate();
  LogCapture log;
  StoreServerOptions options{"127.0.0.1", 0, secret};
  options.warning_interval = 1ms;  // every warning has its own interval: none held back
  StoreServer server(options);
  for (int i = 0; i < 3; ++i) {
    Socket raw = connect_tcp("127.0.0.1", server.port(), soon());
    const Bytes request = encode_request({StoreOp::set, {"k"}, {Bytes(100, 'v')}});
    raw.write_all(request.data(), request.size(), soon(), "raw request");
    ASSERT_TRUE(closed_by_server(raw));
    std::this_thread::sleep_for(5ms);
  }
  server.stop();
  // Each drop is either said itself or counted in a summary: none is lost.
  size_t said = single_drops(log);
  for (const auto& line : log.matching({"W ", "more warning"}))
    said += std::stoul(line.substr(line.find(": ") + 2));  // "...port P: N more warnings"
  EXPECT_EQ(said, 3u) << log.text();
}

}  // namespace
}  // namespace braid::comm
