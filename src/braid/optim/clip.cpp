#include "optim/clip.h"

#include <cmath>

#include "core/error.h"
#include "core/kernels.h"

namespace braid::optim {

double grad_sum_squares(const float* grads, const std::vector<Segment>& segments) {
  double sq = 0;
  for (const Segment& s : segments) sq += sum_squares(grads + s.offset, s.numel);
  return sq;
}

double grad_norm(const float* grads, const std::vector<Segment>& segments) {
  return std::sqrt(grad_sum_squares(grads, segments));
}

float clip_coefficient(double norm, float max_norm) {
  BRAID_CHECK(std::isfinite(max_norm) && max_norm > 0, "clip_grad_norm: max_norm = ", max_norm,
              " must be finite and > 0");
  const double coef = static_cast<double>(max_norm) / (norm + 1e-6);
  // Written so that a NaN norm gives a NaN coefficient (as torch's clamp propagates NaN).
  return coef < 1.0 || std::isnan(coef) ? static_cast<float>(coef) : 1.0f;
}

void scale_grads(float* grads, const std::vector<Segment>& segments, float factor) {
  if (factor == 1.0f) return;
  for (const Segment& s : segments) scale(factor, grads + s.offset, s.numel);
}

float clip_grad_norm(float* grads, const std::vector<Segment>& segments, float max_norm) {
  const double norm = grad_norm(grads, segments);
  scale_grads(grads, segments, clip_coefficient(norm, max_norm));
  return static_cast<float>(norm);
}

}  // namespace braid::optim
