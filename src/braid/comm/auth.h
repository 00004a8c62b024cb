// Mutual authentication of a fresh TCP connection with the job's secret, run before
// anything else is read from the peer, so an outsider can never reach a parser.
//
// How it works: each side sends a 32-byte random nonce, then proves it knows the secret
// with HMAC-SHA256(secret, purpose || role || own nonce || peer nonce) (OpenSSL). Binding
// the role stops a reflected proof; binding both nonces stops a replayed one; binding the
// purpose keeps a store proof from opening a transport connection. Proofs are compared with
// CRYPTO_memcmp (constant time).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comm/deadline.h"
#include "comm/secret.h"
#include "comm/socket.h"
#include "core/error.h"

namespace braid::comm {

// The peer did not prove it knows the job's secret.
class AuthError : public Error {
 public:
  using Error::Error;
};

enum class AuthRole { server, client };

// Mutual HMAC-SHA256 challenge-response on a freshly connected socket. A wrong proof ->
// AuthError saying the peer does not know the job's secret (check BRAID_SECRET /
// BRAID_SECRET_FILE). `purpose` separates uses ("store", "tcp-transport"). An empty
// secret is refused with Error. I/O failures are IoError / TimeoutError as in Socket.
void authenticate(const Socket& socket, const Secret& secret, AuthRole role,
                  std::string_view purpose, Deadline deadline);

// The same handshake without the I/O, for an event loop that must not block on one peer
// (StoreServer). Both sides: send hello(); when kAuthHelloBytes have arrived, send
// respond(them); when kAuthProofBytes more have arrived, verify(them). authenticate() is
// exactly these steps over blocking I/O. Not thread-safe; wipes its copy of the secret.
inline constexpr size_t kAuthNonceBytes = 32;
inline constexpr size_t kAuthPurposeBytes = 16;  // longest purpose name
inline constexpr size_t kAuthHelloBytes = 8 + kAuthPurposeBytes + kAuthNonceBytes;
inline constexpr size_t kAuthProofBytes = 32;

class AuthHandshake {
 public:
  // `peer` names the other side in errors ("127.0.0.1:4711").
  AuthHandshake(const Secret& secret, AuthRole role, std::string_view purpose, std::string peer);
  ~AuthHandshake();
  AuthHandshake(const AuthHandshake&) = delete;
  AuthHandshake& operator=(const AuthHandshake&) = delete;

  // Magic, purpose and this side's fresh nonce.
  std::span<const uint8_t, kAuthHelloBytes> hello() const { return hello_; }
  // Checks the peer's hello (magic, purpose) and returns this side's proof; AuthError
  // when the peer is not a braid process authenticating for the same purpose.
  std::array<uint8_t, kAuthProofBytes> respond(std::span<const uint8_t> peer_hello);
  // AuthError unless `peer_proof` shows the peer knows the secret.
  void verify(std::span<const uint8_t> peer_proof) const;

 private:
  std::array<uint8_t, kAuthProofBytes> proof(AuthRole role, std::span<const uint8_t> first_nonce,
                                             std::span<const uint8_t> second_nonce) const;

  std::vector<uint8_t> key_;
  AuthRole role_;
  std::string purpose_;
  std::string peer_;
  std::array<uint8_t, kAuthHelloBytes> hello_{};
  std::array<uint8_t, kAuthNonceBytes> peer_nonce_{};
  bool responded_ = false;
};

}  // namespace braid::comm
