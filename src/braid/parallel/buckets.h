// Gradient buckets, as PyTorch's DDP cuts them: whole parameters in reverse layer order
// (backward finishes the last parameters first), the first bucket of first_bytes so that
// communication starts early, the rest of bytes (a bytes below first_bytes caps the first
// too: a small model under a small cap still gets several buckets to overlap).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "nn/params.h"

namespace braid::parallel {

struct FloatRange {
  int64_t begin = 0, end = 0;  // floats of the flat buffers
};

// Ranges covering parameters [first_id, end_id) (by default all: [0, params.size())),
// highest offsets first.
std::vector<FloatRange> bucket_ranges(const nn::ParamSet& params, size_t first_bytes, size_t bytes,
                                      size_t first_id = 0, size_t end_id = SIZE_MAX);

}  // namespace braid::parallel
