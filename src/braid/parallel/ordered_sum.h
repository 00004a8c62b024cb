// The elementwise sums deterministic mode is built from: every reduction adds its terms
// one at a time in a fixed order (micro-batch 0, 1, ...; rank 0, 1, ...), starting from
// the first term itself (not from zero, which would turn -0 into +0), so two runs that
// add the same terms in the same order get the same bits whatever produced the terms.
#pragma once

#include <cstdint>

namespace braid::parallel {

// first: sum = term; else sum += term.
void ordered_add(float* sum, const float* term, int64_t n, bool first);
// dst = src * factor.
void scale_into(float* dst, const float* src, int64_t n, float factor);

}  // namespace braid::parallel
