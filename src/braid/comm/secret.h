// The job's shared secret: every store client and transport connection proves it knows
// it (HMAC-SHA256 challenge-response, comm/auth.h) before a request is parsed. The
// launcher makes a fresh one per job; ranks read it from BRAID_SECRET (hex) or the file
// named by BRAID_SECRET_FILE (launch/secret_env.h: comm/ reads no environment). Value type.
//
// A secret a person supplies (a file or a variable) must be at least kMinBytes long,
// and a secret file must not be readable or writable by other users: either would let
// someone else on the machine (or a guesser) join the job, so both are refused with the
// command that fixes them rather than warned about and used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace braid::comm {

class Secret {
 public:
  static constexpr size_t kMinBytes = 16;

  Secret() = default;
  // 32 random bytes from the OS (getrandom).
  static Secret generate();
  // From hex; throws braid::Error on odd length or a non-hex character.
  static Secret from_hex(const std::string& hex);
  // From a file holding the hex secret (surrounding whitespace ignored); IoError naming
  // the file when it cannot be read, Error when it is not a secret, is shorter than
  // kMinBytes, or is a regular file other users may read or write (chmod 600 fixes it).
  static Secret from_file(const std::string& path);
  // A secret a person supplied as text (surrounding whitespace ignored): Error starting
  // with `where` when it is not hex, naming `where` when it is shorter than kMinBytes.
  static Secret from_supplied_hex(const std::string& text, const std::string& where);

  std::string hex() const;
  std::span<const uint8_t> bytes() const { return bytes_; }
  bool empty() const { return bytes_.empty(); }

 private:
  std::vector<uint8_t> bytes_;
};

}  // namespace braid::comm
