// Bearer tokens for braid serve. A token is "braid_" and 64 hex digits (32 bytes from
// OpenSSL's RAND_bytes), shown once when made; the store keeps its SHA-256 only, so a copy
// of the database lets nobody in. A lookup hashes what the client sent and finds the hash
// (an index lookup on a hash of 256 random bits: nothing to learn from its timing).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace braid::serve {

std::string new_token();
std::string token_hash(std::string_view token);  // SHA-256, 64 lowercase hex digits

// The token of an "Authorization" header's value "Bearer TOKEN" (the scheme's case ignored,
// as HTTP says); nullopt for anything else.
std::optional<std::string> bearer_token(std::string_view header);

}  // namespace braid::serve
