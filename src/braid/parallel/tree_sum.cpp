#include "parallel/tree_sum.h"

#include <cstring>

#include "core/error.h"

namespace braid::parallel {
namespace {

int power_of_two_at_least(int count) {
  int h = 1;
  while (h < count) h *= 2;
  return h;
}

// Depth-first leaves of V(i, d) for `count` terms: 0, H/2, H/4, 3H/4, ... below count.
void leaves(int i, int d, int h, int count, std::vector<int>& out) {
  if (d == h) {
    out.push_back(i);
    return;
  }
  leaves(i, 2 * d, h, count, out);
  if (i + d < count) leaves(i + d, 2 * d, h, count, out);
}

}  // namespace

void tree_reduce(float* items, int count, int64_t stride, int64_t n) {
  // Bottom up: at level d, items[i] (i < 2d) holds V(i, 2d).
  for (int d = power_of_two_at_least(count) / 2; d >= 1; d /= 2)
    for (int i = 0; i < d && i + d < count; ++i) {
      float* sum = items + i * stride;
      const float* right = items + (i + d) * stride;
      for (int64_t j = 0; j < n; ++j) sum[j] += right[j];
    }
}

void scale_into(float* dst, const float* src, int64_t n, float factor) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i] * factor;
}

TreeSum::TreeSum(int64_t n, int count) : n_(n), count_(count) {
  BRAID_CHECK(count >= 1 && n >= 0, "TreeSum: ", count, " terms of ", n, " floats");
  const int h = power_of_two_at_least(count);
  leaves(0, 1, h, count, order_);
  // Replays the depth-first walk once, recording what each arriving term does: wait in a
  // slot as a left child, or merge upward with the left siblings it completes.
  struct Node {
    int i, d, where;
  };
  std::vector<Node> stack;
  int slots = 0;
  ops_.resize(order_.size());
  for (size_t p = 0; p < order_.size(); ++p) {
    std::vector<Op>& ops = ops_[p];
    Node cur{order_[p], h, kTerm};
    for (;;) {
      if (cur.d == 1) {  // the root: the whole sum
        ops.push_back({kOut, cur.where, kNone});
        break;
      }
      const int half = cur.d / 2;
      if (cur.i < half) {            // a left child
        if (cur.i + half < count) {  // its sibling comes later: keep it
          if (cur.where == kTerm) {
            const int slot = static_cast<int>(stack.size());
            slots = std::max(slots, slot + 1);
            ops.push_back({slot, kTerm, kNone});
            cur.where = slot;
          }
          stack.push_back(cur);
          break;
        }
        cur.d = half;  // no sibling: the subtree's sum is this one
        continue;
      }
      const Node left = stack.back();  // the right child completes its left sibling
      stack.pop_back();
      BRAID_CHECK(left.i == cur.i - half && left.d == cur.d, "TreeSum: walk out of order");
      ops.push_back({left.where, left.where, cur.where});
      cur = {left.i, half, left.where};
    }
  }
  BRAID_CHECK(stack.empty(), "TreeSum: terms left unsummed");
  // The last position's final merge can write the result straight out.
  std::vector<Op>& last = ops_.back();
  if (last.size() >= 2 && last.back().a == last[last.size() - 2].dst &&
      last[last.size() - 2].b != kNone) {
    last[last.size() - 2].dst = kOut;
    last.pop_back();
  }
  slots_.assign(static_cast<size_t>(slots), std::vector<float>(static_cast<size_t>(n)));
}

void TreeSum::add(int position, const float* term, float* out, int64_t begin, int64_t end) {
  BRAID_CHECK(position >= 0 && position < count_ && begin >= 0 && begin <= end && end <= n_,
              "TreeSum::add: position ", position, " of ", count_, ", range [", begin, ", ", end,
              ") of ", n_);
  const auto operand = [&](int id) -> float* {
    if (id == kTerm) return const_cast<float*>(term) + begin;
    if (id == kOut) return out + begin;
    return slots_[static_cast<size_t>(id)].data() + begin;
  };
  const int64_t len = end - begin;
  for (const Op& op : ops_[static_cast<size_t>(position)]) {
    float* dst = operand(op.dst);
    const float* a = operand(op.a);
    if (op.b == kNone) {
      if (dst != a) std::memmove(dst, a, static_cast<size_t>(len) * sizeof(float));
      continue;
    }
    const float* b = operand(op.b);
    for (int64_t j = 0; j < len; ++j) dst[j] = a[j] + b[j];
  }
}

}  // namespace braid::parallel
