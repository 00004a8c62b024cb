#include "nn/graph_join.h"

#include <cstring>

#include "core/error.h"
#include "core/kernels.h"

namespace braid::nn {
namespace {

std::string shapes_str(const std::vector<Shape>& in) {
  std::string s;
  for (const Shape& x : in) s += (s.empty() ? "" : ", ") + x.str();
  return s;
}

// Elements before `axis` (the rows copied) and from it on (one row of one input).
int64_t outer_of(const Shape& s, int axis) {
  int64_t n = 1;
  for (int d = 0; d < axis; ++d) n *= s[d];
  return n;
}
int64_t row_of(const Shape& s, int axis) {
  int64_t n = 1;
  for (int d = axis; d < s.rank(); ++d) n *= s[d];
  return n;
}

}  // namespace

Shape add_shape(const std::vector<Shape>& in, const std::string& where) {
  BRAID_CHECK(in.size() >= 2, where, " needs at least 2 inputs, got ", in.size());
  for (const Shape& s : in)
    BRAID_CHECK(s == in[0], where, " adds inputs of one shape, got ", shapes_str(in));
  return in[0];
}

Shape concat_shape(const std::vector<Shape>& in, int axis, const std::string& where) {
  BRAID_CHECK(in.size() >= 2, where, " needs at least 2 inputs, got ", in.size());
  const int rank = in[0].rank();
  BRAID_CHECK(axis >= 1 && axis < rank, where, ": axis ", axis - 1,
              " of one sample is out of range for inputs ", shapes_str(in));
  std::vector<int64_t> dims(rank);
  for (int d = 0; d < rank; ++d) dims[d] = in[0][d];
  dims[axis] = 0;
  for (const Shape& s : in) {
    bool fits = s.rank() == rank;
    for (int d = 0; fits && d < rank; ++d) fits = d == axis || s[d] == in[0][d];
    BRAID_CHECK(fits, where, " joins inputs along sample axis ", axis - 1,
                ", so they must agree on every other dimension; got ", shapes_str(in));
    dims[axis] += s[axis];
  }
  return Shape(dims);
}

void add_forward(const std::vector<const Tensor*>& in, Tensor& out) {
  const int64_t n = in[0]->numel();
  out.ensure(in[0]->shape());
  add(in[0]->f32(), in[1]->f32(), out.f32(), n);
  for (size_t k = 2; k < in.size(); ++k) add_inplace(in[k]->f32(), out.f32(), n);
}

void concat_forward(const std::vector<const Tensor*>& in, int axis, Tensor& out) {
  // The shapes were checked by concat_shape when the graph's were computed.
  Shape shape = in[0]->shape();
  for (size_t k = 1; k < in.size(); ++k) shape[axis] += in[k]->shape()[axis];
  out.ensure(shape);
  const int64_t outer = outer_of(shape, axis), out_row = row_of(shape, axis);
  int64_t offset = 0;  // where input k's row starts within an output row
  for (const Tensor* t : in) {
    const int64_t row = row_of(t->shape(), axis);
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(out.f32() + o * out_row + offset, t->f32() + o * row, row * sizeof(float));
    offset += row;
  }
}

void concat_backward(const Tensor& dy, const std::vector<Shape>& in, int axis,
                     const std::vector<bool>& want, std::vector<Tensor>& parts) {
  const int64_t outer = outer_of(dy.shape(), axis), out_row = row_of(dy.shape(), axis);
  parts.resize(in.size());
  int64_t offset = 0;
  for (size_t k = 0; k < in.size(); ++k) {
    const int64_t row = row_of(in[k], axis);
    if (want[k]) {
      parts[k].ensure(in[k], DType::f32, MemCategory::activation_grads);
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(parts[k].f32() + o * row, dy.f32() + o * out_row + offset, row * sizeof(float));
    }
    offset += row;
  }
}

}  // namespace braid::nn
