// authenticate() between two threads over loopback: the same secret passes both ways; a
// wrong secret, a wrong purpose or a peer that is not braid fails on both sides with
// AuthError; an empty secret is refused before any I/O. Also Secret's hex, file and
// environment sources, which refuse short secrets and files other users can read.
#include "comm/auth.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>

#include "comm/secret.h"
#include "comm/socket.h"

namespace braid::comm {
namespace {

using namespace std::chrono_literals;

Deadline soon() { return Deadline::after(30s); }

struct Outcome {
  std::exception_ptr server, client;
};

// Runs `server_side` on an accepted socket in a thread and `client_side` on the connected
// one here; returns what each threw.
Outcome run_pair(const std::function<void(Socket&)>& server_side,
                 const std::function<void(Socket&)>& client_side) {
  Socket listener = listen_tcp("127.0.0.1", 0);
  Outcome out;
  std::thread t([&] {
    try {
      Socket s = accept_tcp(listener, soon());
      server_side(s);
    } catch (...) {
      out.server = std::current_exception();
    }
  });
  try {
    Socket c = connect_tcp("127.0.0.1", listener.local_port(), soon());
    client_side(c);
  } catch (...) {
    out.client = std::current_exception();
  }
  t.join();
  return out;
}

Outcome handshake(const Secret& server_secret, const Secret& client_secret,
                  std::string_view server_purpose = "test",
                  std::string_view client_purpose = "test") {
  return run_pair(
      [&](Socket& s) { authenticate(s, server_secret, AuthRole::server, server_purpose, soon()); },
      [&](Socket& c) { authenticate(c, client_secret, AuthRole::client, client_purpose, soon()); });
}

template <typename E>
std::string thrown_message(const std::exception_ptr& p) {
  if (!p) return "(nothing thrown)";
  try {
    std::rethrow_exception(p);
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("(wrong type) ") + e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

TEST(Auth, SameSecretPassesBothWaysAndTheSocketStaysUsable) {
  const Secret secret = Secret::generate();
  const Outcome o = run_pair(
      [&](Socket& s) {
        authenticate(s, secret, AuthRole::server, "test", soon());
        const uint8_t v = 77;
        s.write_all(&v, 1, soon(), "after auth");
      },
      [&](Socket& c) {
        authenticate(c, secret, AuthRole::client, "test", soon());
        uint8_t v = 0;
        c.read_exact(&v, 1, soon(), "after auth");
        EXPECT_EQ(v, 77);
      });
  EXPECT_FALSE(o.server) << thrown_message<Error>(o.server);
  EXPECT_FALSE(o.client) << thrown_message<Error>(o.client);
}

TEST(Auth, WrongSecretFailsOnBothSidesNamingTheSecretVariables) {
  const Outcome o = handshake(Secret::generate(), Secret::generate());
  const std::string server = thrown_message<AuthError>(o.server);
  const std::string client = thrown_message<AuthError>(o.client);
  EXPECT_TRUE(contains(server, "does not know the job's secret")) << server;
  EXPECT_TRUE(contains(client, "does not know the job's secret")) << client;
  EXPECT_TRUE(contains(client, "BRAID_SECRET")) << client;
}

TEST(Auth, SecretsDifferingInOneBitFail) {
  Secret a = Secret::from_hex("00112233445566778899aabbccddeeff");
  Secret b = Secret::from_hex("00112233445566778899aabbccddeefe");
  const Outcome o = handshake(a, b);
  EXPECT_TRUE(contains(thrown_message<AuthError>(o.server), "secret"));
  EXPECT_TRUE(contains(thrown_message<AuthError>(o.client), "secret"));
}

TEST(Auth, DifferentPurposesFailNamingBoth) {
  const Secret secret = Secret::generate();
  const Outcome o = handshake(secret, secret, "store", "tcp-transport");
  const std::string server = thrown_message<AuthError>(o.server);
  EXPECT_TRUE(contains(server, "'tcp-transport'") && contains(server, "'store'")) << server;
  EXPECT_TRUE(contains(thrown_message<AuthError>(o.client), "'store'"));
}

TEST(Auth, EmptySecretIsRefusedBeforeAnyIo) {
  const Outcome o = run_pair(
      [&](Socket& s) {
        uint8_t b;
        // The client must not have sent anything: it refuses first, then closes.
        s.read_exact(&b, 1, soon(), "server read");
      },
      [&](Socket& c) { authenticate(c, Secret(), AuthRole::client, "test", soon()); });
  const std::string client = thrown_message<Error>(o.client);
  EXPECT_TRUE(contains(client, "secret is empty")) << client;
  EXPECT_TRUE(contains(thrown_message<IoError>(o.server), "connection closed by peer"));
}

TEST(Auth, APeerThatIsNotBraidIsRejected) {
  const Secret secret = Secret::generate();
  const Outcome o =
      run_pair([&](Socket& s) { authenticate(s, secret, AuthRole::server, "test", soon()); },
               [&](Socket& c) {
                 const std::string junk(kAuthHelloBytes, 'x');
                 c.write_all(junk.data(), junk.size(), soon(), "junk");
                 std::vector<uint8_t> hello(kAuthHelloBytes);
                 c.read_exact(hello.data(), hello.size(), soon(), "hello");
               });
  const std::string server = thrown_message<AuthError>(o.server);
  EXPECT_TRUE(contains(server, "not a braid peer")) << server;
}

TEST(Auth, AReflectedHelloIsRejected) {
  const Secret secret = Secret::generate();
  const Outcome o =
      run_pair([&](Socket& s) { authenticate(s, secret, AuthRole::server, "test", soon()); },
               [&](Socket& c) {
                 std::vector<uint8_t> hello(kAuthHelloBytes);
                 c.read_exact(hello.data(), hello.size(), soon(), "hello");
                 c.write_all(hello.data(), hello.size(), soon(), "echo");
                 uint8_t b;
                 c.read_exact(&b, 1, soon(), "rest");
               });
  EXPECT_TRUE(contains(thrown_message<AuthError>(o.server), "echoed"));
}

TEST(Auth, ASilentPeerTimesOut) {
  const Secret secret = Secret::generate();
  Socket listener = listen_tcp("127.0.0.1", 0);
  Socket c = connect_tcp("127.0.0.1", listener.local_port(), soon());
  Socket s = accept_tcp(listener, soon());
  EXPECT_THROW(authenticate(s, secret, AuthRole::server, "test", Deadline::after(50ms)),
               TimeoutError);
}

TEST(AuthHandshake, ProofsAreBoundToRoleAndNonces) {
  const Secret secret = Secret::generate();
  AuthHandshake server(secret, AuthRole::server, "test", "client");
  AuthHandshake client(secret, AuthRole::client, "test", "server");
  const auto server_proof = server.respond(client.hello());
  const auto client_proof = client.respond(server.hello());
  EXPECT_NE(server_proof, client_proof);
  EXPECT_NO_THROW(server.verify(client_proof));
  EXPECT_NO_THROW(client.verify(server_proof));
  // A server's own proof sent back (a reflection) is not a client's proof.
  EXPECT_THROW(server.verify(server_proof), AuthError);
  // Truncated proofs fail without reading past the end.
  EXPECT_THROW(server.verify(std::span<const uint8_t>(client_proof).first(31)), AuthError);
  // A fresh handshake has fresh nonces, so an old proof does not replay.
  AuthHandshake server2(secret, AuthRole::server, "test", "client");
  AuthHandshake client2(secret, AuthRole::client, "test", "server");
  server2.respond(client2.hello());
  EXPECT_THROW(server2.verify(client_proof), AuthError);
}

TEST(Secret, GeneratesDistinct32ByteSecretsThatRoundTripThroughHex) {
  const Secret a = Secret::generate(), b = Secret::generate();
  EXPECT_EQ(a.bytes().size(), 32u);
  EXPECT_NE(a.hex(), b.hex());
  EXPECT_EQ(a.hex().size(), 64u);
  const Secret c = Secret::from_hex(a.hex());
  EXPECT_TRUE(std::equal(a.bytes().begin(), a.bytes().end(), c.bytes().begin(), c.bytes().end()));
  EXPECT_EQ(Secret::from_hex("00FFa5").hex(), "00ffa5");
}

TEST(Secret, RejectsBadHexWithoutEchoingIt) {
  EXPECT_THROW(Secret::from_hex("abc"), Error);
  try {
    Secret::from_hex("abzz");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "position 2")) << e.what();
    EXPECT_FALSE(contains(e.what(), "abzz")) << e.what();
  }
}

class SecretFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("braid_auth_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // A private file (mode 0600 unless told), as a secret file should be.
  std::string write(const std::string& name, const std::string& text, mode_t mode = 0600) {
    const auto path = dir_ / name;
    std::ofstream(path) << text;
    EXPECT_EQ(::chmod(path.c_str(), mode), 0);
    return path.string();
  }

 private:
  std::filesystem::path dir_;
};

// Secrets of exactly the minimum length, 16 bytes.
const std::string kHexA = "000102030405060708090a0b0c0d0e0f";
const std::string kHexB = "f0e0d0c0b0a090807060504030201000";

TEST_F(SecretFiles, ReadsATrimmedHexFile) {
  const std::string path = write("s", "  " + kHexA + "\n");
  EXPECT_EQ(Secret::from_file(path).hex(), kHexA);
}

TEST_F(SecretFiles, ASecretShorterThan16BytesIsRefusedSayingHowToMakeOne) {
  const std::string short_hex = kHexA.substr(2);  // 15 bytes
  try {
    Secret::from_supplied_hex(short_hex, "the flag");
    ADD_FAILURE() << "a 15-byte secret was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "the secret in the flag")) << e.what();
    EXPECT_TRUE(contains(e.what(), "15 bytes")) << e.what();
    EXPECT_TRUE(contains(e.what(), "at least 16")) << e.what();
    EXPECT_TRUE(contains(e.what(), "openssl rand -hex 32")) << e.what();
    EXPECT_FALSE(contains(e.what(), short_hex)) << e.what();  // never echoed
  }
  EXPECT_EQ(Secret::from_supplied_hex(" " + kHexA + "\n", "the flag").hex(), kHexA);
  const std::string path = write("short", "beef\n");
  try {
    Secret::from_file(path);
    ADD_FAILURE() << "a 2-byte secret file was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), path)) << e.what();
    EXPECT_TRUE(contains(e.what(), "2 bytes")) << e.what();
    EXPECT_TRUE(contains(e.what(), "/dev/urandom")) << e.what();
  }
}

TEST_F(SecretFiles, AFileOtherUsersCanReadOrChangeIsRefusedWithTheChmodFix) {
  for (const mode_t mode : {0644, 0640, 0604, 0620, 0666}) {
    const std::string path = write("shared", kHexA, mode);
    try {
      Secret::from_file(path);
      ADD_FAILURE() << "a secret file of mode " << std::oct << mode << " was accepted";
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), path)) << e.what();
      EXPECT_TRUE(contains(e.what(), "chmod 600 " + path)) << e.what();
      EXPECT_TRUE(contains(e.what(), "other users")) << e.what();
    }
    std::filesystem::remove(path);
  }
  EXPECT_EQ(Secret::from_file(write("private", kHexA, 0600)).hex(), kHexA);
  EXPECT_EQ(Secret::from_file(write("readonly", kHexB, 0400)).hex(), kHexB);
}

TEST_F(SecretFiles, MissingEmptyOrBadFilesNameTheFile) {
  const std::string missing = write("x", "") + ".missing";
  try {
    Secret::from_file(missing);
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_TRUE(contains(e.what(), missing)) << e.what();
  }
  const std::string empty = write("empty", "\n");
  EXPECT_THROW(Secret::from_file(empty), Error);
  const std::string bad = write("bad", "xyz!");
  try {
    Secret::from_file(bad);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), bad)) << e.what();
  }
}

}  // namespace
}  // namespace braid::comm
