// authenticate() and AuthHandshake: mutual HMAC-SHA256 challenge-response (see auth.h).
//
// Wire format, each side, in order: hello = "BRDAUTH1" | purpose (16 bytes, zero padded)
// | nonce (32 random bytes); then proof = HMAC-SHA256(secret, "braid-auth-v1" | purpose |
// role | own nonce | peer nonce). Both sides send before they read, and every message is
// tiny, so neither can block the other in the kernel.
#include "comm/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cstring>

namespace braid::comm {

namespace {

constexpr char kMagic[8] = {'B', 'R', 'D', 'A', 'U', 'T', 'H', '1'};
constexpr char kProofLabel[] = "braid-auth-v1";

uint8_t role_byte(AuthRole role) { return role == AuthRole::server ? 'S' : 'C'; }
AuthRole other(AuthRole role) {
  return role == AuthRole::server ? AuthRole::client : AuthRole::server;
}

// The peer's purpose field, printable, for an error message.
std::string printable(std::span<const uint8_t> field) {
  std::string s;
  for (uint8_t c : field) {
    if (c == 0) break;
    s += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  }
  return s;
}

}  // namespace

AuthHandshake::AuthHandshake(const Secret& secret, AuthRole role, std::string_view purpose,
                             std::string peer)
    : key_(secret.bytes().begin(), secret.bytes().end()),
      role_(role),
      purpose_(purpose),
      peer_(std::move(peer)) {
  if (secret.empty())
    BRAID_THROW(Error, "authentication with ", peer_,
                ": the job's secret is empty; set BRAID_SECRET or BRAID_SECRET_FILE (braid "
                "launch makes one per job)");
  BRAID_CHECK(!purpose.empty() && purpose.size() <= kAuthPurposeBytes, "authentication purpose '",
              purpose, "' must have 1..", kAuthPurposeBytes, " characters");
  std::memcpy(hello_.data(), kMagic, sizeof(kMagic));
  std::memcpy(hello_.data() + sizeof(kMagic), purpose.data(), purpose.size());
  uint8_t* nonce = hello_.data() + sizeof(kMagic) + kAuthPurposeBytes;
  if (RAND_bytes(nonce, static_cast<int>(kAuthNonceBytes)) != 1)
    BRAID_THROW(Error, "authentication with ", peer_, ": OpenSSL could not make a random nonce");
}

AuthHandshake::~AuthHandshake() {
  if (!key_.empty()) OPENSSL_cleanse(key_.data(), key_.size());
}

std::array<uint8_t, kAuthProofBytes> AuthHandshake::proof(
    AuthRole role, std::span<const uint8_t> first_nonce,
    std::span<const uint8_t> second_nonce) const {
  std::vector<uint8_t> msg;
  msg.reserve(sizeof(kProofLabel) + kAuthPurposeBytes + 1 + 2 * kAuthNonceBytes);
  msg.insert(msg.end(), kProofLabel, kProofLabel + sizeof(kProofLabel));
  const uint8_t* purpose = hello_.data() + sizeof(kMagic);
  msg.insert(msg.end(), purpose, purpose + kAuthPurposeBytes);
  msg.push_back(role_byte(role));
  msg.insert(msg.end(), first_nonce.begin(), first_nonce.end());
  msg.insert(msg.end(), second_nonce.begin(), second_nonce.end());
  std::array<uint8_t, kAuthProofBytes> out{};
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()), msg.data(), msg.size(),
            out.data(), &len) ||
      len != out.size())
    BRAID_THROW(Error, "authentication with ", peer_, ": OpenSSL HMAC-SHA256 failed");
  return out;
}

std::array<uint8_t, kAuthProofBytes> AuthHandshake::respond(std::span<const uint8_t> peer_hello) {
  BRAID_CHECK(peer_hello.size() == kAuthHelloBytes, "auth hello from ", peer_, " has ",
              peer_hello.size(), " bytes, expected ", kAuthHelloBytes);
  if (std::memcmp(peer_hello.data(), kMagic, sizeof(kMagic)) != 0)
    BRAID_THROW(AuthError, "connection from ", peer_,
                " is not a braid peer (it did not start the authentication handshake); is "
                "something else using this port?");
  const auto peer_purpose = peer_hello.subspan(sizeof(kMagic), kAuthPurposeBytes);
  const auto own_purpose =
      std::span<const uint8_t>(hello_).subspan(sizeof(kMagic), kAuthPurposeBytes);
  if (!std::equal(peer_purpose.begin(), peer_purpose.end(), own_purpose.begin()))
    BRAID_THROW(AuthError, "peer ", peer_, " authenticates for '", printable(peer_purpose),
                "' but this connection is for '", purpose_, "' (connected to the wrong port?)");
  const auto nonce = peer_hello.subspan(sizeof(kMagic) + kAuthPurposeBytes, kAuthNonceBytes);
  const auto own_nonce =
      std::span<const uint8_t>(hello_).subspan(sizeof(kMagic) + kAuthPurposeBytes, kAuthNonceBytes);
  // Our own nonce coming back means the hello was reflected, not answered.
  if (std::equal(nonce.begin(), nonce.end(), own_nonce.begin()))
    BRAID_THROW(AuthError, "peer ", peer_, " echoed this side's challenge; refusing it");
  std::copy(nonce.begin(), nonce.end(), peer_nonce_.begin());
  responded_ = true;
  return proof(role_, own_nonce, peer_nonce_);
}

void AuthHandshake::verify(std::span<const uint8_t> peer_proof) const {
  BRAID_CHECK(responded_, "AuthHandshake::verify before respond");
  const auto own_nonce =
      std::span<const uint8_t>(hello_).subspan(sizeof(kMagic) + kAuthPurposeBytes, kAuthNonceBytes);
  const auto expected = proof(other(role_), peer_nonce_, own_nonce);
  if (peer_proof.size() != expected.size() ||
      CRYPTO_memcmp(peer_proof.data(), expected.data(), expected.size()) != 0)
    BRAID_THROW(AuthError, "peer ", peer_,
                " does not know the job's secret, or this process has a different one (", purpose_,
                " authentication failed); check that BRAID_SECRET / "
                "BRAID_SECRET_FILE name the same secret on every rank and on the store");
}

void authenticate(const Socket& socket, const Secret& secret, AuthRole role,
                  std::string_view purpose, Deadline deadline) {
  const std::string peer = socket.peer_address();
  AuthHandshake hs(secret, role, purpose, peer);
  const std::string what = std::string(purpose) + " authentication with " + peer;
  socket.write_all(hs.hello().data(), hs.hello().size(), deadline, what);
  std::array<uint8_t, kAuthHelloBytes> peer_hello{};
  socket.read_exact(peer_hello.data(), peer_hello.size(), deadline, what);
  const auto own_proof = hs.respond(peer_hello);
  socket.write_all(own_proof.data(), own_proof.size(), deadline, what);
  std::array<uint8_t, kAuthProofBytes> peer_proof{};
  socket.read_exact(peer_proof.data(), peer_proof.size(), deadline, what);
  hs.verify(peer_proof);
}

}  // namespace braid::comm
