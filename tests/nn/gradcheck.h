// The op-test harness: checks a Module's backward against central finite differences.
//
// The scalar probed is L = sum_i out_i * r_i with a fixed random r, accumulated in double.
// Layers compute in fp32, so the finite difference is taken with eps ~ 1e-3 (relative to
// the value's magnitude): truncation error O(eps^2), relative to the coordinate's own
// gradient, and rounding error O(2^-24 |L| / eps), the same for every coordinate of the
// module. So each probed coordinate must satisfy
//   |analytic - numeric| <= rtol * max(|analytic|, |numeric|) + atol * G + module_atol * M,
// G the largest |analytic| or |numeric| probed in its tensor and M the largest in the whole
// module: relative to the coordinate itself, with floors that follow the gradients' scale
// (a coordinate whose gradient nearly cancels keeps the finite difference's absolute
// error). A layer whose gradients are 1e-3 is held to the accuracy of one whose gradients
// are 1; a fixed absolute tolerance of 1e-2 let a LayerNorm backward term off by a factor
// 1 + 1/D through. Measured on Zen 4: every user within 0.35 of the bound (attention's
// input gradient the closest); that LayerNorm error at 2.2 (D = 40) to 6 (D = 19) times it.
// Up to `max_checks` coordinates of the input and of every parameter are probed, spread
// evenly, so large layers stay fast.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "nn/module.h"

namespace braid::nn::testing {

struct GradCheckOptions {
  double eps = 1e-3;
  double rtol = 5e-3;         // of the coordinate's own gradient
  double atol = 1e-3;         // of the largest gradient probed in its tensor
  double module_atol = 2e-4;  // of the largest probed in the module (rounding in L)
  int max_checks = 64;        // per tensor
  bool check_input = true;    // false for integer inputs (token ids)
  Mode mode = Mode::train;
  uint64_t seed = 1;
};

// Fills an f32 tensor with N(0, scale^2) values.
inline void fill_normal(Tensor& t, Rng& rng, float scale = 1.0f) {
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = scale * rng.normal();
}

// Runs forward/backward once with cotangent r, then probes coordinates numerically.
// The module must not have been declared yet: the harness owns its ParamSet.
inline void expect_gradients_match(Module& m, Tensor input, const GradCheckOptions& opt = {}) {
  ParamSet params;
  m.declare(params, "");
  params.allocate();
  Rng rng(opt.seed);
  m.init(rng);
  // Perturb parameters away from special values (zero biases, unit norms).
  for (const auto& p : params.layout()) {
    Tensor w = params.param(params.find(p.name));
    for (int64_t i = 0; i < w.numel(); ++i) w.f32()[i] += 0.1f * rng.normal();
  }
  const ForwardContext ctx{opt.mode, Rng(opt.seed, 99)};
  auto cache = m.make_cache();
  const Shape out_shape = m.output_shape(input.shape());
  Tensor r = Tensor::empty(out_shape);
  fill_normal(r, rng);

  auto loss = [&]() {
    auto c = m.make_cache();
    const Tensor& y = m.forward(input, *c, ctx);
    double s = 0;
    for (int64_t i = 0; i < y.numel(); ++i) s += static_cast<double>(y.f32()[i]) * r.f32()[i];
    return s;
  };

  const Tensor& y = m.forward(input, *cache, ctx);
  ASSERT_EQ(y.shape(), out_shape) << m.kind() << ": forward shape disagrees with output_shape";
  params.zero_grads();
  const Tensor& dx = m.backward(r, *cache, opt.check_input);
  Tensor dx_copy;
  if (opt.check_input) {
    ASSERT_TRUE(dx.defined());
    ASSERT_EQ(dx.shape(), input.shape());
    dx_copy = Tensor::empty(dx.shape());
    dx_copy.copy_from(dx);
  }

  struct Probe {
    std::string what;  // "input" or the parameter's name
    int64_t index;
    double analytic, numeric;
  };
  std::vector<Probe> probes;
  auto probe = [&](float* values, const float* analytic, int64_t n, const std::string& what) {
    const int64_t step = std::max<int64_t>(1, n / opt.max_checks);
    for (int64_t i = 0; i < n; i += step) {
      const float saved = values[i];
      const double h = opt.eps * std::max(1.0, std::fabs(static_cast<double>(saved)));
      values[i] = static_cast<float>(saved + h);
      const double up = loss();
      values[i] = static_cast<float>(saved - h);
      const double down = loss();
      values[i] = saved;
      probes.push_back({what, i, analytic[i], (up - down) / (2 * h)});
    }
  };
  if (opt.check_input) probe(input.f32(), dx_copy.f32(), input.numel(), "input");
  for (size_t id = 0; id < params.layout().size(); ++id) {
    Tensor w = params.param(id);
    probe(w.f32(), params.grad(id).f32(), w.numel(), params.info(id).name);
  }
  auto size = [](const Probe& p) { return std::max(std::fabs(p.analytic), std::fabs(p.numeric)); };
  double module_largest = 0;
  std::map<std::string, double> tensor_largest;
  for (const Probe& p : probes) {
    module_largest = std::max(module_largest, size(p));
    tensor_largest[p.what] = std::max(tensor_largest[p.what], size(p));
  }
  auto bound = [&](const Probe& p) {
    return opt.rtol * size(p) + opt.atol * tensor_largest[p.what] +
           opt.module_atol * module_largest;
  };
  std::map<std::string, double> worst;  // each tensor's largest error / bound
  for (const Probe& p : probes) {
    const double error = std::fabs(p.analytic - p.numeric);
    EXPECT_LE(error, bound(p)) << m.kind() << " d/d" << p.what << "[" << p.index << "]: analytic "
                               << p.analytic << ", numeric " << p.numeric
                               << " (largest gradient probed in the tensor "
                               << tensor_largest[p.what] << ", in the module " << module_largest
                               << ")";
    worst[p.what] = std::max(worst[p.what], error / bound(p));
  }
  // GRADCHECK_REPORT=1 prints how close each tensor came, for choosing a tolerance.
  if (std::getenv("GRADCHECK_REPORT"))
    for (const auto& [what, w] : worst)
      std::printf("gradcheck %.3f of the bound: %s d/d%s\n", w, std::string(m.kind()).c_str(),
                  what.c_str());
}

// Convenience: a random N(0,1) input of the given shape.
inline Tensor random_input(const Shape& shape, uint64_t seed = 3) {
  Rng rng(seed);
  Tensor x = Tensor::empty(shape);
  fill_normal(x, rng);
  return x;
}

}  // namespace braid::nn::testing
