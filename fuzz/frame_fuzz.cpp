// libFuzzer target for parse_frame_header: any bytes, any limit, any peer. It must either
// return a header that satisfies every promise of comm/frame.h or throw PeerError.
//
//   clang++-14 -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Isrc/braid \
//       fuzz/frame_fuzz.cpp src/braid/comm/frame.cpp -o build/frame_fuzz
//   build/frame_fuzz -max_total_time=20
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "comm/frame.h"
#include "comm/transport.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The first 8 bytes (when present) choose the payload limit; the rest is the header.
  uint64_t max_bytes = uint64_t{1} << 40;
  if (size >= 8) {
    std::memcpy(&max_bytes, data, 8);
    data += 8;
    size -= 8;
  }
  try {
    const braid::comm::FrameHeader h =
        braid::comm::parse_frame_header(std::span<const uint8_t>(data, size), max_bytes, 3);
    using braid::comm::FrameType;
    if (size != sizeof(h) || h.magic != braid::comm::kFrameMagic ||
        h.version != braid::comm::kFrameVersion || h.reserved != 0 || h.bytes > max_bytes ||
        (h.type != FrameType::data && h.type != FrameType::goodbye) ||
        (h.type == FrameType::goodbye && h.bytes != 0))
      std::abort();  // accepted something it promised to refuse
  } catch (const braid::comm::PeerError&) {
  }
  return 0;
}
