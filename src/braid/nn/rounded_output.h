// Outputs written in bf16 for the product that reads them. Under Precision::bf16 a layer
// whose output only feeds a Linear (LayerNorm before an attention or MLP projection, GELU
// before the MLP's down-projection) can hand that Linear its operand already rounded: the
// fp32 output is never stored, the activation kept for the weight gradient is the bf16
// copy alone (half the bytes), and the pass that rounded it disappears. The values are
// the ones the Linear would have rounded, bit for bit: the layer computes a block of rows
// in fp32 into scratch that stays in L1 and rounds the block.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/convert.h"
#include "core/tensor.h"

namespace braid::nn {

// compute(first_row, n_rows, float* block) writes rows [first_row, first_row + n_rows) of
// a [rows, dim] output in fp32; they are rounded into out (bf16, [rows, dim]).
template <typename Compute>
void write_rows_rounded(int64_t rows, int64_t dim, Tensor& block, BFloat16* out,
                        Compute&& compute) {
  const int64_t per_block = std::max<int64_t>(1, 4096 / dim);
  block.ensure({std::min(per_block, rows) * dim}, DType::f32, MemCategory::workspace);
  for (int64_t r = 0; r < rows; r += per_block) {
    const int64_t n = std::min(per_block, rows - r);
    compute(r, n, block.f32());
    f32_to_bf16(block.f32(), out + r * dim, n * dim);
  }
}

}  // namespace braid::nn
