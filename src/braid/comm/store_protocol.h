// The bytes between connect_store()'s client and StoreServer, after authentication. The
// client sends one request and reads its response, strictly in turn, on each connection.
// Every message is a 4-byte little-endian body length, then the body. Lengths, counts and
// sizes are checked against the limits below before anything is allocated, so a broken
// or hostile peer gets a clear braid::Error, never a crash or an unchecked allocation.
//
//   request body:  op u8 | timeout_ms i64 | delta i64 | key count u32 | (u32 size, key)*
//                  | value count u32 | (u32 size, value)*
//   response body: status u8 | number i64 | u32 size, bytes
//
// Integers are little-endian. timeout_ms is the client's time left for get/wait (-1: no
// deadline; relative, because client and server clocks differ) and -1 for other ops.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comm/store.h"

namespace braid::comm {

// The authentication purpose (comm/auth.h) of store connections.
inline constexpr char kStoreAuthPurpose[] = "store";

enum class StoreOp : uint8_t { set = 1, get = 2, add = 3, compare_set = 4, wait = 5, remove = 6 };
std::string_view store_op_name(StoreOp op);

inline constexpr size_t kStoreLengthBytes = 4;
inline constexpr size_t kMaxStoreKeyBytes = 4096;
inline constexpr size_t kMaxStoreValueBytes = size_t{64} << 20;
inline constexpr size_t kMaxStoreWaitKeys = 16384;
inline constexpr size_t kStoreRequestFixedBytes = 1 + 8 + 8 + 4 + 4;
inline constexpr size_t kStoreResponseFixedBytes = 1 + 8 + 4;
// The largest valid bodies: compare_set with two full values, or wait on every key.
inline constexpr size_t kMaxStoreRequestBytes =
    kStoreRequestFixedBytes + std::max(4 + kMaxStoreKeyBytes + 2 * (4 + kMaxStoreValueBytes),
                                       kMaxStoreWaitKeys*(4 + kMaxStoreKeyBytes));
inline constexpr size_t kMaxStoreResponseBytes = kStoreResponseFixedBytes + kMaxStoreValueBytes;
static_assert(kMaxStoreRequestBytes < (size_t{1} << 32));

struct StoreRequest {
  StoreOp op = StoreOp::get;
  std::vector<std::string> keys;  // one, except wait: 0..kMaxStoreWaitKeys
  std::vector<Bytes> values;      // set: {value}; compare_set: {expected, desired}; else none
  int64_t delta = 0;              // add only; 0 otherwise
  int64_t timeout_ms = -1;        // get and wait: >= 0 or -1 (none); -1 otherwise

  bool operator==(const StoreRequest&) const = default;
};

enum class StoreStatus : uint8_t {
  ok = 0,
  timeout = 1,  // get/wait: the client's deadline passed on the server
  error = 2,    // the request was refused (e.g. add on a non-integer); value = message
};

struct StoreResponse {
  StoreStatus status = StoreStatus::ok;
  int64_t number = 0;  // add: the new value; remove: 1 if the key existed
  Bytes value;         // get, compare_set: the value; error: the message

  bool operator==(const StoreResponse&) const = default;
};

// Whole messages, length prefix included. Throw braid::Error on a request or response
// that breaks the limits or the per-op shape above (the peer would refuse it).
Bytes encode_request(const StoreRequest& request);
Bytes encode_response(const StoreResponse& response);

// The body size from a message's 4-byte prefix; Error naming `what` when it exceeds
// max_body (checked before the caller allocates the body).
size_t parse_store_length(std::span<const uint8_t> prefix, size_t max_body, std::string_view what);

// Bodies (no prefix), of any length and content: Error on truncated, oversized, trailing,
// unknown-op or wrongly shaped input.
StoreRequest parse_request(std::span<const uint8_t> body);
StoreResponse parse_response(std::span<const uint8_t> body);

}  // namespace braid::comm
