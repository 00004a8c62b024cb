// What travels with every message between two ranks, whatever the transport: a tag that
// matches a send to its receive, and the signature of the call that sent it, so ranks that
// disagree about which collective they are in fail with both calls named instead of
// hanging or reducing garbage.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/reduce.h"

namespace braid::comm {

// Messages from one peer are matched to receives by the whole tag.
//   channel: the group's context id (every sub-group has its own), so groups never mix;
//   seq:     the group's call counter (collectives and p2p calls each take one);
//   step:    the step inside an algorithm (ring step, tree level), or the user's p2p tag.
struct Tag {
  uint32_t channel = 0;
  uint32_t seq = 0;
  uint32_t step = 0;
  friend bool operator==(const Tag&, const Tag&) = default;
};

enum class CallKind : uint8_t {
  p2p,
  allreduce,
  reduce_scatter,
  allgather,
  broadcast,
  reduce,
  gather,
  scatter,
  alltoall,
  barrier,
  split,  // Group::split's exchange of colours
};
const char* call_kind_name(CallKind k);

// The call a message belongs to. Every rank of a collective computes the same signature;
// a receive that meets a frame with its own (channel, seq) but another signature is a
// CollectiveMismatch.
struct CallSignature {
  CallKind call = CallKind::p2p;
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;
  uint8_t algorithm = 0;  // comm/algorithm.h's Algorithm, 0 = not applicable
  int32_t root = -1;      // -1 = no root
  uint64_t count = 0;     // elements (per rank where the collective says so)
  friend bool operator==(const CallSignature&, const CallSignature&) = default;
};
static_assert(sizeof(CallSignature) == 16);

// "allreduce #7 (f32 sum, 1000 elements, ring)" for error messages.
std::string describe_call(const CallSignature& sig, uint32_t seq);

// A send/recv tag spelled by four printable characters, so error messages can print its
// name: named_tag("push") is 0x70757368, printed as tag 'push'. A protocol over send/recv
// names its tags this way (parallel/ps_protocol.h).
constexpr uint32_t named_tag(const char (&name)[5]) {
  return static_cast<uint32_t>(static_cast<unsigned char>(name[0])) << 24 |
         static_cast<uint32_t>(static_cast<unsigned char>(name[1])) << 16 |
         static_cast<uint32_t>(static_cast<unsigned char>(name[2])) << 8 |
         static_cast<uint32_t>(static_cast<unsigned char>(name[3]));
}

// Where a message sits in its call, for error messages: "step 3" of a collective's
// algorithm; for send/recv, the caller's tag: "tag 'push'" (named_tag), else "tag 42".
std::string describe_step(const CallSignature& sig, const Tag& tag);

// How a receive combines incoming data into its destination: dst = op(dst, incoming).
struct Reduction {
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;
};

}  // namespace braid::comm
