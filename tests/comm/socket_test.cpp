// Socket, listen/accept/connect and parse_host_port over loopback with ephemeral ports:
// bytes arrive intact, a closed peer is an IoError, a missed deadline a TimeoutError.
#include "comm/socket.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace braid::comm {
namespace {

using namespace std::chrono_literals;

Deadline soon() { return Deadline::after(30s); }

// A connected pair over loopback: {client side, server side}.
std::pair<Socket, Socket> connected_pair() {
  Socket listener = listen_tcp("127.0.0.1", 0);
  Socket client = connect_tcp("127.0.0.1", listener.local_port(), soon());
  Socket server = accept_tcp(listener, soon());
  return {std::move(client), std::move(server)};
}

template <typename F>
void expect_throw_containing(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an exception containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ParseHostPort, AcceptsNamesIpv4AndBracketedIpv6) {
  auto a = parse_host_port("localhost:29500");
  EXPECT_EQ(a.host, "localhost");
  EXPECT_EQ(a.port, 29500);
  auto b = parse_host_port("10.0.0.7:0");
  EXPECT_EQ(b.host, "10.0.0.7");
  EXPECT_EQ(b.port, 0);
  auto c = parse_host_port("[::1]:65535");
  EXPECT_EQ(c.host, "::1");
  EXPECT_EQ(c.port, 65535);
}

TEST(ParseHostPort, RejectsMalformedAddressesNamingThem) {
  for (const char* bad : {"", "host", "host:", ":80", "host:65536", "host:-1", "host:8x", "::1:80",
                          "[::1]80", "[::1", "[]:80"}) {
    try {
      parse_host_port(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(Socket, MovesOwnershipAndClosesOnce) {
  auto [client, server] = connected_pair();
  const int fd = client.fd();
  Socket moved(std::move(client));
  EXPECT_FALSE(client.valid());
  EXPECT_EQ(moved.fd(), fd);
  Socket assigned;
  assigned = std::move(moved);
  EXPECT_EQ(assigned.fd(), fd);
  assigned.close();
  EXPECT_FALSE(assigned.valid());
  assigned.close();  // idempotent
}

TEST(Socket, TransfersLargeBuffersBothWaysIntact) {
  auto [client, server] = connected_pair();
  client.set_nodelay();
  server.set_nodelay();
  std::vector<uint8_t> sent(8 << 20);
  std::iota(sent.begin(), sent.end(), uint8_t{7});
  std::vector<uint8_t> got(sent.size());
  // Larger than the socket buffers, so the writer must wait for the reader.
  std::thread writer([&] { client.write_all(sent.data(), sent.size(), soon(), "test write"); });
  server.read_exact(got.data(), got.size(), soon(), "test read");
  writer.join();
  EXPECT_EQ(got, sent);
  server.write_all(sent.data(), 100, soon(), "reply");
  std::vector<uint8_t> back(100);
  client.read_exact(back.data(), back.size(), soon(), "reply");
  EXPECT_TRUE(std::equal(back.begin(), back.end(), sent.begin()));
}

// A zero-byte write or read returns at once, touching neither the buffer (null here) nor
// the stream: with a deadline already past, any wait would be a TimeoutError; with nothing
// to read and with bytes pending alike; and the bytes written around zero-byte writes
// arrive in order, none added, none consumed by zero-byte reads.
TEST(Socket, ZeroByteIoIsANoOp) {
  auto [client, server] = connected_pair();
  const Deadline past = Deadline::after(0ms);
  ASSERT_TRUE(past.expired());
  EXPECT_NO_THROW(server.read_exact(nullptr, 0, past, "empty read, nothing sent"));
  EXPECT_NO_THROW(client.write_all(nullptr, 0, past, "empty write"));
  const std::vector<uint8_t> sent = {1, 2, 3, 4, 5};
  client.write_all(sent.data(), 2, soon(), "first part");
  EXPECT_NO_THROW(client.write_all(nullptr, 0, past, "empty write between"));
  client.write_all(sent.data() + 2, 3, soon(), "second part");
  EXPECT_NO_THROW(client.write_all(nullptr, 0, past, "empty write after"));
  std::vector<uint8_t> got(5, 0);
  server.read_exact(got.data(), 1, soon(), "first byte");
  EXPECT_NO_THROW(server.read_exact(nullptr, 0, past, "empty read, bytes pending"));
  server.read_exact(got.data() + 1, 4, soon(), "the rest");
  EXPECT_EQ(got, sent);
  // Nothing more arrived: a one-byte read with a past deadline finds the stream empty.
  uint8_t extra = 0;
  EXPECT_THROW(server.read_exact(&extra, 1, past, "nothing more"), TimeoutError);
}

TEST(Socket, ReportsAddresses) {
  Socket listener = listen_tcp("127.0.0.1", 0);
  const uint16_t port = listener.local_port();
  EXPECT_NE(port, 0);
  Socket client = connect_tcp("127.0.0.1", port, soon());
  Socket server = accept_tcp(listener, soon());
  EXPECT_EQ(client.peer_address(), "127.0.0.1:" + std::to_string(port));
  EXPECT_EQ(server.peer_address(), "127.0.0.1:" + std::to_string(client.local_port()));
}

TEST(Socket, PeerCloseIsAnIoErrorNamingTheOperation) {
  auto [client, server] = connected_pair();
  server.close();
  uint8_t b = 0;
  expect_throw_containing([&] { client.read_exact(&b, 1, soon(), "store reply from test"); },
                          "store reply from test: connection closed by peer");
}

TEST(Socket, PeerCloseMidMessageIsAnIoError) {
  auto [client, server] = connected_pair();
  const uint8_t half[3] = {1, 2, 3};
  server.write_all(half, sizeof(half), soon(), "half");
  server.close();
  uint8_t buf[8];
  EXPECT_THROW(client.read_exact(buf, sizeof(buf), soon(), "read"), IoError);
}

TEST(Socket, WriteToAClosedPeerIsAnIoErrorNotSigpipe) {
  auto [client, server] = connected_pair();
  server.close();
  std::vector<uint8_t> data(1 << 20);
  // The first writes may land in the kernel buffer; the RST then fails a later one.
  EXPECT_THROW(
      {
        for (int i = 0; i < 64; ++i) client.write_all(data.data(), data.size(), soon(), "w");
      },
      IoError);
}

TEST(Socket, ReadPastTheDeadlineIsATimeoutError) {
  auto [client, server] = connected_pair();
  uint8_t b = 0;
  expect_throw_containing([&] { client.read_exact(&b, 1, Deadline::after(50ms), "quiet peer"); },
                          "quiet peer: timed out");
  EXPECT_THROW(client.read_exact(&b, 1, Deadline::after(0ms), "expired"), TimeoutError);
}

TEST(Socket, WriteToAPeerThatNeverReadsTimesOut) {
  auto [client, server] = connected_pair();
  client.set_buffer_sizes(64 << 10);
  server.set_buffer_sizes(64 << 10);
  std::vector<uint8_t> data(16 << 20);
  EXPECT_THROW(client.write_all(data.data(), data.size(), Deadline::after(200ms), "stuck peer"),
               TimeoutError);
}

TEST(Socket, NonBlockingSocketsStillHonourDeadlines) {
  auto [client, server] = connected_pair();
  client.set_nonblocking(true);
  server.set_nonblocking(true);
  uint8_t v = 42, got = 0;
  std::thread t([&] { server.write_all(&v, 1, soon(), "nb write"); });
  client.read_exact(&got, 1, soon(), "nb read");
  t.join();
  EXPECT_EQ(got, 42);
}

TEST(Listen, AcceptTimesOutWithoutAConnection) {
  Socket listener = listen_tcp("127.0.0.1", 0);
  EXPECT_THROW(accept_tcp(listener, Deadline::after(50ms)), TimeoutError);
}

TEST(Listen, ABusyPortIsAnIoErrorNamingIt) {
  Socket first = listen_tcp("127.0.0.1", 0);
  const std::string port = std::to_string(first.local_port());
  expect_throw_containing([&] { listen_tcp("127.0.0.1", first.local_port()); },
                          "127.0.0.1:" + port);
}

TEST(Connect, RetriesUntilTheListenerAppears) {
  uint16_t port = 0;
  {
    Socket probe = listen_tcp("127.0.0.1", 0);
    port = probe.local_port();
  }  // closed: connects are refused until the listener below exists
  Socket client;
  std::thread t([&] { client = connect_tcp("127.0.0.1", port, soon()); });
  Socket listener = listen_tcp("127.0.0.1", port);
  Socket server = accept_tcp(listener, soon());
  t.join();
  ASSERT_TRUE(client.valid());
  const uint8_t v = 9;
  client.write_all(&v, 1, soon(), "w");
  uint8_t got = 0;
  server.read_exact(&got, 1, soon(), "r");
  EXPECT_EQ(got, 9);
}

TEST(Connect, NobodyListeningTimesOutNamingTheAddress) {
  uint16_t port = 0;
  {
    Socket probe = listen_tcp("127.0.0.1", 0);
    port = probe.local_port();
  }
  expect_throw_containing([&] { connect_tcp("127.0.0.1", port, Deadline::after(100ms)); },
                          "127.0.0.1:" + std::to_string(port));
  EXPECT_THROW(connect_tcp("127.0.0.1", port, Deadline::after(100ms)), TimeoutError);
}

TEST(Connect, ResolvesHostNames) {
  Socket listener = listen_tcp("localhost", 0);
  Socket client = connect_tcp("localhost", listener.local_port(), soon());
  Socket server = accept_tcp(listener, soon());
  EXPECT_TRUE(server.valid());
}

}  // namespace
}  // namespace braid::comm
