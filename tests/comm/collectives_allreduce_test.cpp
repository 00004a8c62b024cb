// Allreduce, gloo-style sweep over the in-process transport with ranks as threads: group
// sizes 1, 2, 3, 4, 5, 7, 8 x counts 0 .. 4099 x every algorithm (forced through
// CollectiveOptions) and the automatic choice x every dtype x every op. Each result is
// checked against the dense reference (collective_reference.h) and must be bitwise
// identical on every rank.
#include <gtest/gtest.h>

#include <mutex>
#include <vector>

#include "comm/algorithms.h"  // kSegmentBytes
#include "comm/collective_reference.h"
#include "comm/collectives.h"
#include "comm/inproc_ranks.h"

namespace braid::comm {
namespace {

using testing::check_reduced;
using testing::digest;
using testing::fill_input;
using testing::kSanitized;
using testing::rethrow_first;
using testing::run_group;

constexpr size_t kCounts[] = {0, 1, 2, 7, 13, 100, 1000, 4099};
constexpr Algorithm kAlgorithms[] = {Algorithm::ring,          Algorithm::halving_doubling,
                                     Algorithm::binary_blocks, Algorithm::tree,
                                     Algorithm::direct,        Algorithm::automatic};
constexpr DType kDTypes[] = {DType::f32, DType::f64, DType::bf16,
                             DType::f16, DType::i32, DType::i64};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max,
                             ReduceOp::prod};

struct Case {
  size_t count;
  Algorithm algorithm;
  DType dtype;
  ReduceOp op;
};

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (size_t count : kCounts) {
    if (kSanitized && count > 1000) continue;
    for (Algorithm a : kAlgorithms)
      for (DType t : kDTypes)
        for (ReduceOp op : kOps) cases.push_back({count, a, t, op});
  }
  return cases;
}

std::string describe(const Case& c, int n) {
  return std::string(algorithm_name(c.algorithm)) + " allreduce, " + std::to_string(n) +
         " ranks, " + std::to_string(c.count) + " x " + std::string(dtype_name(c.dtype)) + " " +
         std::string(reduce_op_name(c.op));
}

class AllreduceSweep : public ::testing::TestWithParam<int> {};

TEST_P(AllreduceSweep, EveryAlgorithmDtypeOpAndCount) {
  const int n = GetParam();
  const auto cases = all_cases();
  std::vector<uint64_t> digests(cases.size() * static_cast<size_t>(n));
  std::mutex report;
  auto errors = run_group(n, [&](Group& g) {
    std::vector<uint8_t> buf;
    int failures = 0;
    for (size_t k = 0; k < cases.size(); ++k) {
      const Case& c = cases[k];
      const auto seed = static_cast<uint32_t>(k);
      buf.assign(c.count * dtype_size(c.dtype) + 1, 0);
      fill_input(c.dtype, c.op, seed, g.rank(), 0, buf.data(), c.count);
      CollectiveOptions o;
      o.algorithm = c.algorithm;
      allreduce(g, buf.data(), c.count, c.dtype, c.op, o);
      const std::string bad = check_reduced(c.dtype, c.op, seed, n, 0, buf.data(), c.count);
      if (!bad.empty() && failures++ < 5) {
        std::lock_guard lock(report);
        ADD_FAILURE() << describe(c, n) << " on rank " << g.rank() << ": " << bad;
      }
      digests[k * static_cast<size_t>(n) + static_cast<size_t>(g.rank())] =
          digest(buf.data(), c.count * dtype_size(c.dtype));
    }
  });
  rethrow_first(errors);
  int mismatches = 0;
  for (size_t k = 0; k < cases.size(); ++k)
    for (int r = 1; r < n; ++r)
      if (digests[k * static_cast<size_t>(n) + static_cast<size_t>(r)] !=
              digests[k * static_cast<size_t>(n)] &&
          mismatches++ < 5)
        ADD_FAILURE() << describe(cases[k], n) << ": rank " << r
                      << "'s result differs from rank 0's";
}

INSTANTIATE_TEST_SUITE_P(GroupSizes, AllreduceSweep, ::testing::Values(1, 2, 3, 4, 5, 7, 8),
                         [](const auto& info) { return "ranks" + std::to_string(info.param); });

// Buffers large enough for several segments per ring chunk (and more segments than the
// pipeline keeps in flight), in odd sizes, for the bandwidth algorithms.
TEST(Allreduce, LargeBuffersPipelineSegments) {
  for (int n : {2, 3, 5}) {
    if (kSanitized && n != 3) continue;
    // 6 segments per chunk: two pipeline blocks, the second one partly empty.
    const size_t count = 6 * kSegmentBytes / 4 * static_cast<size_t>(n) + 13;
    for (Algorithm a : {Algorithm::ring, Algorithm::halving_doubling, Algorithm::binary_blocks}) {
      std::vector<uint64_t> digests(static_cast<size_t>(n));
      auto errors = run_group(n, [&](Group& g) {
        std::vector<float> buf(count);
        fill_input(DType::f32, ReduceOp::sum, 99, g.rank(), 0, buf.data(), count);
        CollectiveOptions o;
        o.algorithm = a;
        allreduce(g, buf.data(), count, DType::f32, ReduceOp::sum, o);
        if (g.rank() == 0) {  // the others are compared with rank 0 bit for bit below
          EXPECT_EQ(check_reduced(DType::f32, ReduceOp::sum, 99, n, 0, buf.data(), count), "")
              << algorithm_name(a) << " on " << n << " ranks";
        }
        digests[static_cast<size_t>(g.rank())] = digest(buf.data(), count * 4);
      });
      rethrow_first(errors);
      for (int r = 1; r < n; ++r) EXPECT_EQ(digests[static_cast<size_t>(r)], digests[0]);
    }
  }
}

// Unaligned buffers work and give the same bits as aligned ones.
TEST(Allreduce, UnalignedBuffers) {
  auto errors = run_group(3, [&](Group& g) {
    std::vector<uint8_t> raw(1 + 4 * 1001);
    std::vector<float> aligned(1001);
    fill_input(DType::f32, ReduceOp::sum, 5, g.rank(), 0, aligned.data(), aligned.size());
    std::memcpy(raw.data() + 1, aligned.data(), 4 * aligned.size());
    allreduce(g, raw.data() + 1, aligned.size(), DType::f32, ReduceOp::avg);
    allreduce(g, aligned.data(), aligned.size(), DType::f32, ReduceOp::avg);
    EXPECT_EQ(0, std::memcmp(raw.data() + 1, aligned.data(), 4 * aligned.size()));
  });
  rethrow_first(errors);
}

}  // namespace
}  // namespace braid::comm
