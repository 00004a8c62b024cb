// How a width-cut (tensor-parallel) model's parameter relates to the full model's: the
// rank's part is runs of the full tensor's rows (a column-parallel weight, its bias, a
// vocabulary slice) or of its columns (a row-parallel weight), concatenated in order.
// Parameters a cut model declares without a WidthCut are the full ones, whole.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace braid::nn {

struct WidthCut {
  std::string name;  // the parameter's name, the same in both models
  bool columns = false;
  std::vector<std::pair<int64_t, int64_t>> runs;  // (first, count) along the cut dimension
};

}  // namespace braid::nn
