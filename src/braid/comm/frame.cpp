// parse_frame_header: copies the bytes out first (the caller's span may be shared memory a
// peer can still change), then checks every field against the values braid writes, so the
// caller acts only on a header whose payload size it has agreed to.
#include "comm/frame.h"

#include <cstring>

#include "comm/transport.h"

namespace braid::comm {

namespace {

[[noreturn]] void bad_frame(int peer, const std::string& what) {
  BRAID_THROW(PeerError, "rank ", peer, " sent a corrupt frame header: ", what,
              "; it is not speaking braid's transport protocol (a different braid version, or "
              "memory corruption in that process)");
}

}  // namespace

FrameHeader parse_frame_header(std::span<const uint8_t> raw, uint64_t max_bytes, int peer) {
  if (raw.size() != sizeof(FrameHeader))
    bad_frame(peer,
              detail::concat("truncated: ", raw.size(), " bytes instead of ", sizeof(FrameHeader)));
  FrameHeader h;
  std::memcpy(&h, raw.data(), sizeof(h));
  if (h.magic != kFrameMagic)
    bad_frame(peer, detail::concat("magic 0x", std::hex, h.magic, " instead of 0x", kFrameMagic));
  if (h.version != kFrameVersion)
    bad_frame(peer, detail::concat("version ", h.version, " instead of ", kFrameVersion));
  if (h.type != FrameType::data && h.type != FrameType::goodbye)
    bad_frame(peer, detail::concat("frame type ", static_cast<unsigned>(h.type)));
  if (h.reserved != 0) bad_frame(peer, detail::concat("reserved field ", h.reserved));
  if (static_cast<unsigned>(h.sig.call) > static_cast<unsigned>(CallKind::split))
    bad_frame(peer, detail::concat("call kind ", static_cast<unsigned>(h.sig.call)));
  if (static_cast<unsigned>(h.sig.dtype) > static_cast<unsigned>(DType::f64))
    bad_frame(peer, detail::concat("dtype ", static_cast<unsigned>(h.sig.dtype)));
  if (static_cast<unsigned>(h.sig.op) > static_cast<unsigned>(ReduceOp::prod))
    bad_frame(peer, detail::concat("reduce op ", static_cast<unsigned>(h.sig.op)));
  if (h.sig.root < -1) bad_frame(peer, detail::concat("root ", h.sig.root));
  if (h.type == FrameType::goodbye && h.bytes != 0)
    bad_frame(peer, detail::concat("goodbye frame with ", h.bytes, " bytes of payload"));
  if (h.bytes > max_bytes)
    bad_frame(peer,
              detail::concat("payload of ", h.bytes, " bytes exceeds the limit of ", max_bytes));
  return h;
}

}  // namespace braid::comm
