// The one order in which deterministic mode adds gradients, whatever the world size.
//
// A step's gradient is the sum of C = ranks x accumulate_steps terms: one per micro-batch
// of the global batch. Term L is the micro-batch of global rows L, L + C, L + 2C, ...,
// which under the distributed sampler and MicroBatches' interleaving is rank L mod N's
// micro-batch L / N. The sum is a fixed tree over L,
//
//   V(i, d) = V(i, 2d) + V(i + d, 2d)   (just V(i, 2d) when i + d >= C),
//   V(i, H) = term i,   H = C rounded up to a power of two,   sum = V(0, 1),
//
// so rank r's terms {r, r + N, ...} form the subtree V(r, N) whenever N is a power of two:
// each rank sums its own micro-batches (TreeSum below, over accumulate_steps terms) and the
// ranks' sums meet in the same tree over N (tree_reduce). 4 ranks x 1, 2 ranks x 2 and
// 1 rank x 4 micro-batches then add the same terms in the same grouping: bitwise equal.
// With N not a power of two it is still one fixed order (run to run, rank to rank), but
// equal across world sizes only when accumulate_steps is 1.
//
// A sum starts from its first term itself, never from zero (which would turn -0 into +0).
#pragma once

#include <cstdint>
#include <vector>

namespace braid::parallel {

// items[0] = the tree's sum of items[0..count), each `n` floats `stride` apart; the other
// items are left as scratch.
void tree_reduce(float* items, int count, int64_t stride, int64_t n);
// dst = src * factor.
void scale_into(float* dst, const float* src, int64_t n, float factor);

// The same tree over terms that arrive one at a time (a rank's micro-batches), keeping
// log2(count) + 1 partial sums of n floats. Terms must come in order(): depth first, the
// order in which the tree needs them.
class TreeSum {
 public:
  TreeSum() = default;
  TreeSum(int64_t n, int count);

  int count() const { return count_; }
  // Term index (micro-batch) to compute at each position.
  const std::vector<int>& order() const { return order_; }
  // Takes floats [begin, end) of the term at `position`; the last position writes the sum
  // there into `out` (which may be `term`). A term may come range by range (as backward
  // reports ranges final), but every range of it before the next position starts.
  void add(int position, const float* term, float* out, int64_t begin, int64_t end);

 private:
  // One elementwise step: dst = a (b < 0) or dst = a + b. Operands: kTerm, kOut or a slot.
  struct Op {
    int dst, a, b;
  };
  static constexpr int kTerm = -1, kOut = -2, kNone = -3;

  int64_t n_ = 0;
  int count_ = 0;
  std::vector<int> order_;
  std::vector<std::vector<Op>> ops_;  // per position
  std::vector<std::vector<float>> slots_;
};

}  // namespace braid::parallel
