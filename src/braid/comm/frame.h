// The header in front of every message on a byte-stream transport (shm rings, TCP), and
// its validation. A header is checked field by field before anything is allocated or
// copied for its payload: a truncated, corrupt or oversized frame is a PeerError naming
// the peer and the field, never a crash or an allocation of an unchecked size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "comm/message.h"

namespace braid::comm {

inline constexpr uint32_t kFrameMagic = 0x31445242;  // "BRD1" little-endian
inline constexpr uint16_t kFrameVersion = 1;

enum class FrameType : uint16_t {
  data = 1,     // a message: header then `bytes` of payload
  goodbye = 2,  // the peer is closing cleanly; no payload
};

// Fixed 48 bytes, native byte order (braid assumes little-endian hosts throughout).
struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint16_t version = kFrameVersion;
  FrameType type = FrameType::data;
  Tag tag;
  uint32_t reserved = 0;
  CallSignature sig;
  uint64_t bytes = 0;
};
static_assert(sizeof(FrameHeader) == 48);

// Validates `raw` (what arrived from rank `peer`; any length) as a FrameHeader: exact
// size, magic, version, type, enum fields in range, reserved zero, payload <= max_bytes
// (and zero for goodbye). Throws PeerError otherwise.
FrameHeader parse_frame_header(std::span<const uint8_t> raw, uint64_t max_bytes, int peer);

}  // namespace braid::comm
