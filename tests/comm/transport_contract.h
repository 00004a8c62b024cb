// The fixture of the Transport contract tests (transport_contract_test.cpp and
// any_rank_receive_test.cpp): every transport kind by name, a world of n ranks of it, and
// the signatures and tags the tests send with.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <set>
#include <thread>

#include "comm/shm_transport.h"
#include "comm/tcp_transport.h"
#include "comm/transport_factory.h"
#include "core/reduce.h"
#include "transport_test_util.h"

#if __has_include("comm/inproc_transport.h")
#include "comm/inproc_transport.h"
#define BRAID_HAVE_INPROC 1
#endif

namespace braid::comm::contract_testing {

using namespace braid::comm::testing;  // NOLINT: the transport test utilities

constexpr size_t kSmallRing = size_t{64} << 10;

inline World make_world(const std::string& kind, int n, TransportOptions options = {}) {
#ifdef BRAID_HAVE_INPROC
  if (kind == "inproc") {
    World world;
    for (auto& t : make_inproc_transports(n))
      world.push_back(std::shared_ptr<Transport>(std::move(t)));
    return world;
  }
#endif
  if (kind == "shm-small-ring") options.shm_ring_bytes = kSmallRing;
  if (kind == "shm" || kind == "shm-small-ring")
    return connect_world(
        [&](Store& s, int r, int size) {
          return connect_shm_transport(s, r, size, soon(), options);
        },
        n);
  return connect_world(
      [&](Store& s, int r, int size) {
        return connect_tcp_transport(s, r, size, test_secret(), soon(), options);
      },
      n);
}

inline CallSignature p2p_sig(uint64_t bytes) {
  CallSignature sig;
  sig.call = CallKind::p2p;
  sig.dtype = DType::f32;
  sig.count = bytes;
  return sig;
}

inline CallSignature allreduce_sig(uint64_t count, DType dtype = DType::f32,
                                   ReduceOp op = ReduceOp::sum) {
  CallSignature sig;
  sig.call = CallKind::allreduce;
  sig.dtype = dtype;
  sig.op = op;
  sig.count = count;
  sig.algorithm = 1;
  return sig;
}

inline Tag tag(uint32_t step, uint32_t seq = 0, uint32_t channel = 1) {
  return Tag{channel, seq, step};
}

inline std::vector<std::string> kinds() {
  std::vector<std::string> k;
#ifdef BRAID_HAVE_INPROC
  k.push_back("inproc");
#endif
  k.push_back("shm");
  k.push_back("shm-small-ring");
  k.push_back("tcp");
  return k;
}

// Parameterised by the transport kind's name.
class TransportContract : public ::testing::TestWithParam<std::string> {
 protected:
  bool streams() const { return GetParam() != "inproc"; }
};

// Test names from kind names ("shm-small-ring" -> "shm_small_ring").
inline std::string kind_test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

}  // namespace braid::comm::contract_testing
