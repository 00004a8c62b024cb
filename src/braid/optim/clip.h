// Gradient clipping by global L2 norm, as torch.nn.utils.clip_grad_norm_ (norm_type 2).
//
// The three steps are separate so a distributed caller can insert an all-reduce:
//   double sq = grad_sum_squares(grads, my_segments);     // local part
//   all-reduce sq (sum) across the ranks that share the model
//   scale_grads(grads, my_segments, clip_coefficient(std::sqrt(sq), max_norm));
// clip_grad_norm does all three for one process.
#pragma once

#include <vector>

#include "optim/segment.h"

namespace braid::optim {

// Sum of squares of the gradients in all segments, accumulated in double.
double grad_sum_squares(const float* grads, const std::vector<Segment>& segments);

// sqrt(grad_sum_squares(...)): the global L2 norm.
double grad_norm(const float* grads, const std::vector<Segment>& segments);

// The factor torch applies: max_norm / (norm + 1e-6) when that is below 1, else exactly 1.
// A NaN or infinite norm gives NaN or 0, as torch's default (error_if_nonfinite = false)
// does; callers with loss scaling skip such steps before clipping. max_norm must be > 0.
float clip_coefficient(double norm, float max_norm);

// grads *= factor in every segment (nothing when factor == 1).
void scale_grads(float* grads, const std::vector<Segment>& segments, float factor);

// Clips in place and returns the norm before clipping.
float clip_grad_norm(float* grads, const std::vector<Segment>& segments, float max_norm);

}  // namespace braid::optim
