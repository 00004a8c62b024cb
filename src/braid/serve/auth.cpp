#include "serve/auth.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <cctype>

#include "core/error.h"

namespace braid::serve {
namespace {

std::string hex(const unsigned char* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return out;
}

}  // namespace

std::string new_token() {
  unsigned char bytes[32];
  BRAID_CHECK(RAND_bytes(bytes, sizeof bytes) == 1,
              "braid serve: OpenSSL could not make random bytes for a token");
  return "braid_" + hex(bytes, sizeof bytes);
}

std::string token_hash(std::string_view token) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  // Fetched once: OpenSSL 3 looks EVP_sha256() up again in every call, under a lock all the
  // server's threads share.
  static EVP_MD* const sha256 = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  BRAID_CHECK(sha256 != nullptr, "braid serve: OpenSSL has no SHA-256");
  BRAID_CHECK(EVP_Digest(token.data(), token.size(), digest, &size, sha256, nullptr) == 1,
              "braid serve: OpenSSL's SHA-256 failed");
  return hex(digest, size);
}

std::optional<std::string> bearer_token(std::string_view header) {
  constexpr std::string_view kScheme = "bearer ";
  if (header.size() <= kScheme.size()) return std::nullopt;
  for (size_t i = 0; i < kScheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(header[i])) != kScheme[i]) return std::nullopt;
  std::string_view token = header.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  if (token.empty() || token.find(' ') != std::string_view::npos) return std::nullopt;
  return std::string(token);
}

}  // namespace braid::serve
