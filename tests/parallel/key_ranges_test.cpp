// Key ranges against their contract and against an exhaustive search: they tile the
// buffer, cut only at tensor starts, give every server at least one tensor, and no other
// cut into as many ranges has a smaller largest range.
#include "parallel/key_ranges.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>

#include "core/error.h"
#include "core/rng.h"

namespace braid::parallel {
namespace {

// Tensors of the given sizes laid out back to back, each start rounded up to `align`.
std::vector<optim::Segment> layout(const std::vector<int64_t>& sizes, int64_t align,
                                   int64_t* total) {
  std::vector<optim::Segment> out;
  int64_t at = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    at = (at + align - 1) / align * align;
    std::string name = "t";  // built in two steps: GCC 12's -Wrestrict misfires on "t" + s
    name += std::to_string(i);
    out.push_back({name, at, sizes[i], true});
    at += sizes[i];
  }
  *total = (at + align - 1) / align * align;
  return out;
}

int64_t largest(const std::vector<KeyRange>& ranges) {
  int64_t m = 0;
  for (const KeyRange& r : ranges) m = std::max(m, r.size());
  return m;
}

// The best largest range over every way to cut the tensors into `servers` groups.
int64_t best_by_search(const std::vector<optim::Segment>& segs, int64_t total, int servers) {
  const auto n = static_cast<int>(segs.size());
  int64_t best = std::numeric_limits<int64_t>::max();
  // Cut positions as a bitmask over the n - 1 gaps between tensors.
  for (uint32_t mask = 0; mask < (1u << (n - 1)); ++mask) {
    if (__builtin_popcount(mask) != servers - 1) continue;
    int64_t begin = 0, worst = 0;
    for (int i = 1; i < n; ++i) {
      if (mask & (1u << (i - 1))) {
        worst = std::max(worst, segs[static_cast<size_t>(i)].offset - begin);
        begin = segs[static_cast<size_t>(i)].offset;
      }
    }
    best = std::min(best, std::max(worst, total - begin));
  }
  return best;
}

void expect_contract(const std::vector<optim::Segment>& segs, int64_t total, int servers,
                     const std::vector<KeyRange>& ranges) {
  ASSERT_EQ(static_cast<int>(ranges.size()), servers);
  EXPECT_EQ(ranges.front().begin, 0);
  EXPECT_EQ(ranges.back().end, total);
  for (size_t s = 0; s < ranges.size(); ++s) {
    if (s > 0) {
      EXPECT_EQ(ranges[s].begin, ranges[s - 1].end) << s;
    }
    const auto inside = segments_in(segs, ranges[s]);
    EXPECT_FALSE(inside.empty()) << "server " << s << " holds no tensor";
    if (s > 0) {
      const bool at_a_start = std::any_of(
          segs.begin(), segs.end(), [&](const auto& g) { return g.offset == ranges[s].begin; });
      EXPECT_TRUE(at_a_start) << "range " << s << " starts inside a tensor";
    }
  }
}

TEST(KeyRanges, TileTheBufferAtTensorStartsWithTheSmallestLargestRange) {
  Rng rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng.below(10));
    std::vector<int64_t> sizes;
    for (int i = 0; i < n; ++i) {
      // Mostly small tensors with the odd large one, as in real models.
      sizes.push_back(rng.below(4) == 0 ? 1 + static_cast<int64_t>(rng.below(5000))
                                        : 1 + static_cast<int64_t>(rng.below(50)));
    }
    int64_t total = 0;
    const auto segs = layout(sizes, trial % 2 ? 16 : 1, &total);
    for (int servers = 1; servers <= n; ++servers) {
      const auto ranges = split_key_ranges(segs, total, servers);
      expect_contract(segs, total, servers, ranges);
      EXPECT_EQ(largest(ranges), best_by_search(segs, total, servers))
          << "trial " << trial << ", " << n << " tensors, " << servers << " servers";
    }
  }
}

// The mlp's three layers over two servers: the 784x1024 weight and its bias on one, the
// 1024x1024 and 1024x10 layers on the other (4.2 MB against 3.2 MB: no cut is closer).
TEST(KeyRanges, MlpOverTwoServers) {
  int64_t total = 0;
  const auto segs = layout({1024 * 784, 1024, 1024 * 1024, 1024, 10 * 1024, 10}, 16, &total);
  const auto ranges = split_key_ranges(segs, total, 2);
  EXPECT_EQ(ranges[0], (KeyRange{0, segs[2].offset}));
  EXPECT_EQ(ranges[1], (KeyRange{segs[2].offset, total}));
  const auto second = segments_in(segs, ranges[1]);
  ASSERT_EQ(second.size(), 4u);
  EXPECT_EQ(second[0].offset, 0);  // rebased
  EXPECT_EQ(second[0].name, "t2");
}

TEST(KeyRanges, MoreServersThanTensorsIsAnErrorNamingBoth) {
  int64_t total = 0;
  const auto segs = layout({10, 20}, 1, &total);
  try {
    split_key_ranges(segs, total, 3);
    FAIL() << "3 servers for 2 tensors were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 servers but the model has only 2 parameter tensors"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(split_key_ranges(segs, total, 0), Error);
}

}  // namespace
}  // namespace braid::parallel
