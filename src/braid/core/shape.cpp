#include "core/shape.h"

#include <ostream>

#include "core/error.h"

namespace braid {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::vector<int64_t>(dims)) {}

Shape::Shape(const std::vector<int64_t>& dims) {
  BRAID_CHECK(dims.size() <= kMaxDims, "a shape has at most ", kMaxDims, " dimensions, got ",
              dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    BRAID_CHECK(dims[i] >= 0, "negative dimension ", dims[i]);
    dims_[i] = dims[i];
  }
  rank_ = static_cast<int>(dims.size());
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<size_t>(i)];
  return n;
}

std::string Shape::str() const {
  std::string out = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i) out += ", ";
    out += std::to_string(dims_[static_cast<size_t>(i)]);
  }
  return out + "]";
}

bool Shape::operator==(const Shape& other) const {
  if (rank_ != other.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[static_cast<size_t>(i)] != other.dims_[static_cast<size_t>(i)]) return false;
  return true;
}

std::ostream& operator<<(std::ostream& out, const Shape& s) { return out << s.str(); }

}  // namespace braid
