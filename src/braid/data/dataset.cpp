// Helpers for the common data types in dataset.h.
#include "data/dataset.h"

#include "core/error.h"

namespace braid::data {

std::string_view split_name(Split s) { return s == Split::train ? "train" : "test"; }

ImageDataset ImageDataset::allocate(int64_t n, int64_t h, int64_t w, int64_t c,
                                    int32_t num_classes) {
  BRAID_CHECK(n >= 0 && h > 0 && w > 0 && c > 0 && num_classes > 0, "bad image dataset geometry ",
              n, "x", h, "x", w, "x", c, " with ", num_classes, " classes");
  ImageDataset d;
  d.pixels = Buffer(static_cast<size_t>(n * h * w * c), MemCategory::data);
  d.labels = Tensor::empty({n}, DType::i32, MemCategory::data);
  d.n = n;
  d.h = h;
  d.w = w;
  d.c = c;
  d.num_classes = num_classes;
  return d;
}

Shape batch_shape(int64_t n, const Shape& per_sample) {
  BRAID_CHECK(per_sample.rank() < Shape::kMaxDims, "sample shape ", per_sample.str(),
              " has too many dimensions for a batch");
  std::vector<int64_t> dims{n};
  for (int i = 0; i < per_sample.rank(); ++i) dims.push_back(per_sample[i]);
  return Shape(dims);
}

}  // namespace braid::data
