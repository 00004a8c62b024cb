// The deterministic sum (parallel/tree_sum.h) against a direct evaluation of its defining
// recursion, and the property DDP relies on: each rank's tree over its own terms, then the
// tree over the ranks, is the tree over all terms, bit for bit, for any power-of-two N.
#include "parallel/tree_sum.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/rng.h"

namespace braid::parallel {
namespace {

constexpr int64_t kFloats = 37;

// Terms whose sums round differently in different groupings: magnitudes 1e-4 .. 1e4.
std::vector<std::vector<float>> terms(int count, uint64_t seed) {
  Rng rng(seed);
  std::vector<std::vector<float>> t(static_cast<size_t>(count), std::vector<float>(kFloats));
  for (auto& term : t)
    for (float& x : term)
      x = static_cast<float>(rng.normal()) * std::pow(10.0f, static_cast<float>(rng.below(9)) - 4);
  return t;
}

int pow2_at_least(int c) {
  int h = 1;
  while (h < c) h *= 2;
  return h;
}

// V(i, d) = V(i, 2d) + V(i + d, 2d), written out as the header states it.
std::vector<float> reference(const std::vector<std::vector<float>>& t, int i, int d, int h) {
  if (d == h) return t[static_cast<size_t>(i)];
  std::vector<float> left = reference(t, i, 2 * d, h);
  if (i + d < static_cast<int>(t.size())) {
    const std::vector<float> right = reference(t, i + d, 2 * d, h);
    for (int64_t j = 0; j < kFloats; ++j) left[j] = left[j] + right[j];
  }
  return left;
}

std::vector<float> streamed(const std::vector<std::vector<float>>& t, int64_t chunk) {
  TreeSum sum(kFloats, static_cast<int>(t.size()));
  std::vector<float> out(kFloats, -1.0f);
  for (int p = 0; p < sum.count(); ++p) {
    const std::vector<float>& term = t[static_cast<size_t>(sum.order()[static_cast<size_t>(p)])];
    for (int64_t b = 0; b < kFloats; b += chunk)
      sum.add(p, term.data(), out.data(), b, std::min(kFloats, b + chunk));
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(TreeSum, StreamedAndInPlaceEqualTheRecursionForEveryCount) {
  for (int count = 1; count <= 13; ++count) {
    const auto t = terms(count, static_cast<uint64_t>(count));
    const std::vector<float> want = reference(t, 0, 1, pow2_at_least(count));
    EXPECT_TRUE(same_bits(streamed(t, kFloats), want)) << count << " terms";
    EXPECT_TRUE(same_bits(streamed(t, 5), want)) << count << " terms, range by range";
    std::vector<float> items;
    for (const auto& term : t) items.insert(items.end(), term.begin(), term.end());
    tree_reduce(items.data(), count, kFloats, kFloats);
    EXPECT_TRUE(same_bits({items.begin(), items.begin() + kFloats}, want)) << count << " terms";
  }
}

TEST(TreeSum, OrderIsDepthFirstAndEveryTermOnce) {
  const TreeSum sum(1, 8);
  EXPECT_EQ(sum.order(), (std::vector<int>{0, 4, 2, 6, 1, 5, 3, 7}));
  const TreeSum odd(1, 5);
  EXPECT_EQ(odd.order(), (std::vector<int>{0, 4, 2, 1, 3}));
}

// N ranks with m terms each (rank r holds terms r, r + N, ...): local trees, then the
// ranks' tree, equal the tree over all N m terms; a left-to-right fold does not.
TEST(TreeSum, RanksThenAcrossRanksIsTheWholeTree) {
  for (const auto& [n, m] : {std::pair{1, 8}, {2, 4}, {4, 2}, {8, 1}, {2, 3}, {4, 3}}) {
    const auto t = terms(n * m, 99);
    const std::vector<float> want = reference(t, 0, 1, pow2_at_least(n * m));
    std::vector<float> ranks(static_cast<size_t>(n * kFloats));
    for (int r = 0; r < n; ++r) {
      std::vector<std::vector<float>> mine;
      for (int k = 0; k < m; ++k) mine.push_back(t[static_cast<size_t>(r + n * k)]);
      const std::vector<float> local = streamed(mine, kFloats);
      std::copy(local.begin(), local.end(), ranks.begin() + r * kFloats);
    }
    tree_reduce(ranks.data(), n, kFloats, kFloats);
    EXPECT_TRUE(same_bits({ranks.begin(), ranks.begin() + kFloats}, want)) << n << " ranks x " << m;
  }
  const auto t = terms(8, 99);
  std::vector<float> fold = t[0];
  for (size_t i = 1; i < t.size(); ++i)
    for (int64_t j = 0; j < kFloats; ++j) fold[j] += t[i][j];
  EXPECT_FALSE(same_bits(fold, reference(t, 0, 1, 8))) << "the terms do not tell groupings apart";
}

}  // namespace
}  // namespace braid::parallel
