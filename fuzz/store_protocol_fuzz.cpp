// libFuzzer target for the store's wire format (comm/store_protocol.h): any bytes given
// to the request and response parsers either parse or throw braid::Error, never crash,
// hang or over-allocate; what parses re-encodes to the same bytes.
//
//   clang++-14 -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -Isrc/braid \
//     fuzz/store_protocol_fuzz.cpp src/braid/comm/store_protocol.cpp src/braid/core/error.cpp
//   ./a.out -max_total_time=20 -rss_limit_mb=2048
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "comm/store_protocol.h"
#include "core/error.h"

using namespace braid::comm;

namespace {

// A parsed message must encode back to exactly its input (the format has one spelling).
void check_round_trip(std::span<const uint8_t> body, const Bytes& encoded) {
  if (encoded.size() != body.size() + kStoreLengthBytes ||
      std::memcmp(encoded.data() + kStoreLengthBytes, body.data(), body.size()) != 0)
    std::abort();
  if (parse_store_length(std::span<const uint8_t>(encoded).first(kStoreLengthBytes),
                         kMaxStoreRequestBytes, "fuzz") != body.size())
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  if (size >= kStoreLengthBytes) {
    try {
      parse_store_length(input.first(kStoreLengthBytes), kMaxStoreRequestBytes, "fuzz");
    } catch (const braid::Error&) {
    }
  }
  try {
    const StoreRequest r = parse_request(input);
    check_round_trip(input, encode_request(r));
  } catch (const braid::Error&) {
  }
  try {
    const StoreResponse r = parse_response(input);
    check_round_trip(input, encode_response(r));
  } catch (const braid::Error&) {
  }
  return 0;
}
