// parse_frame_header: every field braid writes is checked, each failure is a PeerError
// naming the peer and the field, and a header round-trips unchanged.
#include "comm/frame.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "comm/transport.h"

namespace braid::comm {
namespace {

std::vector<uint8_t> raw(const FrameHeader& h) {
  std::vector<uint8_t> v(sizeof(h));
  std::memcpy(v.data(), &h, sizeof(h));
  return v;
}

FrameHeader good() {
  FrameHeader h;
  h.tag = {3, 17, 2};
  h.sig.call = CallKind::allreduce;
  h.sig.dtype = DType::bf16;
  h.sig.op = ReduceOp::max;
  h.sig.algorithm = 2;
  h.sig.root = 1;
  h.sig.count = 1000;
  h.bytes = 2000;
  return h;
}

std::string error_of(const std::vector<uint8_t>& bytes, uint64_t max = 1 << 20) {
  try {
    parse_frame_header(bytes, max, 5);
  } catch (const PeerError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(Frame, AValidHeaderRoundTrips) {
  const FrameHeader h = parse_frame_header(raw(good()), 2000, 1);
  EXPECT_EQ(h.tag, good().tag);
  EXPECT_EQ(h.sig, good().sig);
  EXPECT_EQ(h.bytes, 2000u);
  EXPECT_EQ(h.type, FrameType::data);
  FrameHeader bye;
  bye.type = FrameType::goodbye;
  EXPECT_EQ(parse_frame_header(raw(bye), 0, 1).type, FrameType::goodbye);
}

TEST(Frame, EachCorruptFieldIsAPeerErrorNamingPeerAndField) {
  struct Case {
    const char* field;
    void (*corrupt)(FrameHeader&);
  };
  const Case cases[] = {
      {"magic", [](FrameHeader& h) { h.magic ^= 1; }},
      {"version", [](FrameHeader& h) { h.version = 2; }},
      {"frame type", [](FrameHeader& h) { h.type = static_cast<FrameType>(9); }},
      {"reserved", [](FrameHeader& h) { h.reserved = 1; }},
      {"call kind", [](FrameHeader& h) { h.sig.call = static_cast<CallKind>(200); }},
      {"dtype", [](FrameHeader& h) { h.sig.dtype = static_cast<DType>(6); }},
      {"reduce op", [](FrameHeader& h) { h.sig.op = static_cast<ReduceOp>(5); }},
      {"root", [](FrameHeader& h) { h.sig.root = -2; }},
      {"exceeds", [](FrameHeader& h) { h.bytes = (1 << 20) + 1; }},
      {"goodbye",
       [](FrameHeader& h) {
         h.type = FrameType::goodbye;
         h.bytes = 1;
       }},
  };
  for (const Case& c : cases) {
    FrameHeader h = good();
    c.corrupt(h);
    const std::string what = error_of(raw(h));
    EXPECT_NE(what.find("rank 5"), std::string::npos) << c.field << ": " << what;
    EXPECT_NE(what.find(c.field), std::string::npos) << c.field << ": " << what;
  }
}

TEST(Frame, EveryTruncationAndOverlongInputIsRefused) {
  std::vector<uint8_t> bytes = raw(good());
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::string what = error_of(std::vector<uint8_t>(bytes.begin(), bytes.begin() + n));
    EXPECT_NE(what.find("truncated"), std::string::npos) << n << ": " << what;
  }
  bytes.push_back(0);
  EXPECT_NE(error_of(bytes).find("truncated"), std::string::npos);
}

TEST(Frame, ThePayloadLimitIsInclusive) {
  FrameHeader h = good();
  h.bytes = 4096;
  EXPECT_EQ(parse_frame_header(raw(h), 4096, 0).bytes, 4096u);
  EXPECT_THROW(parse_frame_header(raw(h), 4095, 0), PeerError);
}

}  // namespace
}  // namespace braid::comm
