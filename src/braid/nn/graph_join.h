// The nodes of a Graph that read several inputs: add (elementwise sum of equal shapes) and
// concat (joined along one dimension of the batched tensor). f32 throughout; outputs and
// gradient parts go to caller-owned tensors reshaped with ensure(), so a steady step
// allocates nothing.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"

namespace braid::nn {

// The output shape of add: every input's shape, which must agree; `where` names the node
// in the error ("node 'sum' (add)").
Shape add_shape(const std::vector<Shape>& in, const std::string& where);
// The output shape of concat along `axis` (>= 1, below the inputs' rank): the inputs'
// shapes, equal except along axis, where their sizes add.
Shape concat_shape(const std::vector<Shape>& in, int axis, const std::string& where);

// out = sum_k in[k]   (every [...] of one shape)
void add_forward(const std::vector<const Tensor*>& in, Tensor& out);
// out [..., sum_k n_k, ...] = in[0] [..., n_0, ...] | in[1] [..., n_1, ...] | ... along axis
void concat_forward(const std::vector<const Tensor*>& in, int axis, Tensor& out);
// part k [..., n_k, ...] = dy's slice of input k along axis, for the k where want[k].
void concat_backward(const Tensor& dy, const std::vector<Shape>& in, int axis,
                     const std::vector<bool>& want, std::vector<Tensor>& parts);

}  // namespace braid::nn
