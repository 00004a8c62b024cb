// Pooling layers against naive NHWC loops and finite differences; max-pool ties, NaN and
// shape errors.
#include "nn/pooling.h"

#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "gradcheck.h"

namespace braid::nn {
namespace {

using testing::expect_gradients_match;
using testing::random_input;

// Distinct values 0.1 apart, shuffled: no two inputs of a window come within the
// finite-difference step of each other, so the argmax is stable under probing.
Tensor distinct_input(const Shape& shape, uint64_t seed = 4) {
  Tensor x = Tensor::empty(shape);
  const int64_t n = x.numel();
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  Rng rng(seed);
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(perm[static_cast<size_t>(i)], perm[rng.below(static_cast<uint64_t>(i + 1))]);
  for (int64_t i = 0; i < n; ++i)
    x.f32()[i] = 0.1f * static_cast<float>(perm[static_cast<size_t>(i)] - n / 2);
  return x;
}

// Naive NHWC window pool: max (is_max) or mean.
Tensor naive_pool(const Tensor& x, int64_t k, int64_t s, bool is_max) {
  const Shape& in = x.shape();
  const int64_t B = in[0], H = in[1], W = in[2], C = in[3];
  const int64_t OH = (H - k) / s + 1, OW = (W - k) / s + 1;
  Tensor y = Tensor::empty({B, OH, OW, C});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t oy = 0; oy < OH; ++oy)
      for (int64_t ox = 0; ox < OW; ++ox)
        for (int64_t c = 0; c < C; ++c) {
          double acc = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
          for (int64_t ky = 0; ky < k; ++ky)
            for (int64_t kx = 0; kx < k; ++kx) {
              const double v = x.f32()[((b * H + oy * s + ky) * W + ox * s + kx) * C + c];
              acc = is_max ? std::max(acc, v) : acc + v;
            }
          y.f32()[((b * OH + oy) * OW + ox) * C + c] =
              static_cast<float>(is_max ? acc : acc / static_cast<double>(k * k));
        }
  return y;
}

void expect_tensors_near(const Tensor& a, const Tensor& b, double tol) {
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_NEAR(a.f32()[i], b.f32()[i], tol) << i;
}

struct PoolCase {
  Shape in;
  int64_t k, stride;
};
// Odd sizes exercise the floor; stride < kernel overlaps windows.
const PoolCase kCases[] = {{{2, 6, 6, 3}, 2, 2},
                           {{2, 7, 5, 4}, 2, 2},
                           {{1, 7, 8, 5}, 3, 2},
                           {{2, 5, 4, 2}, 2, 1},
                           {{1, 3, 3, 17}, 3, 3}};

TEST(MaxPool2d, ForwardMatchesNaiveAndGradientsMatch) {
  for (const PoolCase& pc : kCases) {
    SCOPED_TRACE(::testing::Message() << pc.in << " k=" << pc.k << " s=" << pc.stride);
    MaxPool2d pool(pc.k, pc.stride);
    Tensor x = distinct_input(pc.in);
    auto cache = pool.make_cache();
    expect_tensors_near(pool.forward(x, *cache, ForwardContext()),
                        naive_pool(x, pc.k, pc.stride, true), 0);
    MaxPool2d fresh(pc.k, pc.stride);
    expect_gradients_match(fresh, distinct_input(pc.in));
  }
}

TEST(MaxPool2d, TiesSendTheGradientToTheFirstMaximum) {
  MaxPool2d pool(2);
  Tensor x = Tensor::empty({1, 4, 4, 2});  // all zeros: every window is a tie
  auto cache = pool.make_cache();
  pool.forward(x, *cache, ForwardContext());
  Tensor dy = Tensor::empty({1, 2, 2, 2});
  for (int64_t i = 0; i < dy.numel(); ++i) dy.f32()[i] = 1.0f + static_cast<float>(i);
  const Tensor& dx = pool.backward(dy, *cache, true);
  for (int64_t y = 0; y < 4; ++y)
    for (int64_t x0 = 0; x0 < 4; ++x0)
      for (int64_t c = 0; c < 2; ++c) {
        const float expect =
            (y % 2 == 0 && x0 % 2 == 0) ? dy.f32()[((y / 2) * 2 + x0 / 2) * 2 + c] : 0.0f;
        EXPECT_EQ(dx.f32()[(y * 4 + x0) * 2 + c], expect) << y << "," << x0 << "," << c;
      }
}

TEST(MaxPool2d, SteadyStateStepAllocatesNothing) {
  MaxPool2d pool(2);
  Tensor x = random_input({2, 6, 6, 3});
  Tensor dy = random_input({2, 3, 3, 3}, 5);
  auto cache = pool.make_cache();
  auto step = [&] {
    pool.forward(x, *cache, ForwardContext());
    pool.backward(dy, *cache, true);
  };
  step();
  const int64_t before = MemoryTracker::process().allocations();
  step();
  EXPECT_EQ(MemoryTracker::process().allocations(), before);
}

TEST(MaxPool2d, ReusedCacheClearsTheUncoveredBorder) {
  // A larger batch first leaves old values in the reused dx; the 5x5 input's last row and
  // column lie outside every 2x2 window and must come back zero.
  for (int64_t stride : {2, 1}) {
    MaxPool2d pool(2, stride);
    auto cache = pool.make_cache();
    Tensor big = random_input({2, 6, 6, 3});
    pool.forward(big, *cache, ForwardContext());
    pool.backward(random_input(pool.output_shape(big.shape()), 5), *cache, true);
    Tensor x = distinct_input({1, 5, 5, 3});
    Tensor dy = random_input(pool.output_shape(x.shape()), 6);
    pool.forward(x, *cache, ForwardContext());
    const Tensor& dx = pool.backward(dy, *cache, true);
    MaxPool2d fresh_pool(2, stride);
    auto fresh = fresh_pool.make_cache();
    fresh_pool.forward(x, *fresh, ForwardContext());
    const Tensor& ref = fresh_pool.backward(dy, *fresh, true);
    for (int64_t i = 0; i < dx.numel(); ++i) ASSERT_EQ(dx.f32()[i], ref.f32()[i]) << i;
    if (stride == 2) {
      EXPECT_EQ(dx.f32()[(4 * 5 + 4) * 3], 0.0f);
    }
  }
}

TEST(MaxPool2d, NaNPropagates) {
  MaxPool2d pool(2);
  Tensor x = random_input({1, 2, 2, 3});
  x.f32()[1 * 3 + 1] = std::numeric_limits<float>::quiet_NaN();  // pixel (0, 1), channel 1
  auto cache = pool.make_cache();
  const Tensor& y = pool.forward(x, *cache, ForwardContext());
  EXPECT_FALSE(std::isnan(y.f32()[0]));
  EXPECT_TRUE(std::isnan(y.f32()[1]));
  EXPECT_FALSE(std::isnan(y.f32()[2]));
}

TEST(AvgPool2d, ForwardMatchesNaiveAndGradientsMatch) {
  for (const PoolCase& pc : kCases) {
    SCOPED_TRACE(::testing::Message() << pc.in << " k=" << pc.k << " s=" << pc.stride);
    AvgPool2d pool(pc.k, pc.stride);
    Tensor x = random_input(pc.in);
    auto cache = pool.make_cache();
    expect_tensors_near(pool.forward(x, *cache, ForwardContext()),
                        naive_pool(x, pc.k, pc.stride, false), 1e-5);
    AvgPool2d fresh(pc.k, pc.stride);
    expect_gradients_match(fresh, random_input(pc.in));
  }
}

TEST(GlobalAvgPool, ForwardMatchesNaiveAndGradientsMatch) {
  GlobalAvgPool pool;
  Tensor x = random_input({3, 4, 5, 6});
  auto cache = pool.make_cache();
  const Tensor& y = pool.forward(x, *cache, ForwardContext());
  ASSERT_EQ(y.shape(), Shape({3, 6}));
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t c = 0; c < 6; ++c) {
      double s = 0;
      for (int64_t p = 0; p < 20; ++p) s += x.f32()[(b * 20 + p) * 6 + c];
      EXPECT_NEAR(y.f32()[b * 6 + c], s / 20, 1e-5);
    }
  GlobalAvgPool fresh;
  expect_gradients_match(fresh, random_input({2, 3, 3, 4}));
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Pooling, ShapeErrorsNameTheShape) {
  const std::string small = error_of([] { MaxPool2d(3).output_shape({2, 2, 5, 4}); });
  EXPECT_NE(small.find("[2, 2, 5, 4]"), std::string::npos) << small;
  EXPECT_NE(small.find("3x3"), std::string::npos) << small;
  const std::string rank = error_of([] { AvgPool2d(2).output_shape({2, 8, 8}); });
  EXPECT_NE(rank.find("[2, 8, 8]"), std::string::npos) << rank;
  EXPECT_NE(rank.find("[B, H, W, C]"), std::string::npos) << rank;
  const std::string global = error_of([] { GlobalAvgPool().output_shape({4, 10}); });
  EXPECT_NE(global.find("[4, 10]"), std::string::npos) << global;
  EXPECT_THROW(MaxPool2d(0), Error);
  EXPECT_EQ(MaxPool2d(2).output_shape({1, 5, 7, 3}), Shape({1, 2, 3, 3}));
  EXPECT_EQ(MaxPool2d(3, 1).output_shape({1, 5, 7, 3}), Shape({1, 3, 5, 3}));
}

}  // namespace
}  // namespace braid::nn
