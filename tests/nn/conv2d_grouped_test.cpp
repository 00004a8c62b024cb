// Conv2d with dilation and groups (the grouped path, conv2d_grouped.cpp) against a naive
// NHWC reference written as plain loops, for the forward and every gradient, and against
// finite differences; plus the promise that dilation 1 and groups 1 run today's code.
#include <algorithm>
#include <cmath>
#include <vector>

#include "gradcheck.h"
#include "nn/conv2d.h"

namespace braid::nn {
namespace {

using testing::expect_gradients_match;
using testing::GradCheckOptions;
using testing::random_input;

struct Config {
  int64_t B, H, W, C, O, k, stride, pad, dilation, groups;
  bool bias;
  Conv2dOptions options() const {
    return {.stride = stride, .padding = pad, .dilation = dilation, .groups = groups, .bias = bias};
  }
  int64_t span() const { return dilation * (k - 1) + 1; }
  int64_t OH() const { return (H + 2 * pad - span()) / stride + 1; }
  int64_t OW() const { return (W + 2 * pad - span()) / stride + 1; }
};

const Config kConfigs[] = {
    {2, 9, 10, 4, 6, 3, 1, 2, 2, 1, true},   // dilation 2
    {2, 11, 9, 3, 5, 3, 2, 3, 3, 1, true},   // dilation 3, stride 2
    {2, 8, 7, 4, 6, 3, 1, 1, 1, 2, true},    // groups 2
    {1, 9, 9, 8, 12, 3, 2, 1, 2, 4, false},  // groups 4, dilation 2, stride 2, no bias
    {2, 7, 8, 6, 6, 3, 1, 1, 1, 6, true},    // depthwise
    {2, 7, 8, 4, 12, 3, 2, 2, 2, 4, true},   // depthwise, multiplier 3, stride, dilation
    {1, 6, 6, 4, 8, 1, 1, 0, 1, 2, true},    // grouped 1x1
    {1, 5, 6, 4, 4, 2, 1, 0, 2, 4, true},    // even kernel, dilated depthwise
    {2, 10, 9, 6, 9, 3, 1, 3, 3, 3, false},  // groups 3, dilation 3, padding 3
};

// The reference, with torch's definition: group gi = o / (O/G) reads input channels
// [gi*C/G, (gi+1)*C/G); tap (ky, kx) reads x at (oy*s - p + ky*d, ox*s - p + kx*d).
// Forward y = conv(x), and for a given dy the three gradients, all in double.
struct Reference {
  std::vector<double> y, dx, dw, db;
};

Reference naive_conv(const Config& f, const float* x, const float* w, const float* bias,
                     const float* dy) {
  const int64_t OH = f.OH(), OW = f.OW(), Cg = f.C / f.groups, Og = f.O / f.groups;
  Reference r;
  r.y.assign(static_cast<size_t>(f.B * OH * OW * f.O), 0.0);
  r.dx.assign(static_cast<size_t>(f.B * f.H * f.W * f.C), 0.0);
  r.dw.assign(static_cast<size_t>(f.O * Cg * f.k * f.k), 0.0);
  r.db.assign(static_cast<size_t>(f.O), 0.0);
  for (int64_t b = 0; b < f.B; ++b)
    for (int64_t oy = 0; oy < OH; ++oy)
      for (int64_t ox = 0; ox < OW; ++ox)
        for (int64_t o = 0; o < f.O; ++o) {
          const int64_t yi = ((b * OH + oy) * OW + ox) * f.O + o;
          const int64_t gi = o / Og;
          double s = bias ? bias[o] : 0.0;
          r.db[o] += dy[yi];
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t ky = 0; ky < f.k; ++ky)
              for (int64_t kx = 0; kx < f.k; ++kx) {
                const int64_t iy = oy * f.stride - f.pad + ky * f.dilation;
                const int64_t ix = ox * f.stride - f.pad + kx * f.dilation;
                if (iy < 0 || iy >= f.H || ix < 0 || ix >= f.W) continue;
                const int64_t xi = ((b * f.H + iy) * f.W + ix) * f.C + gi * Cg + c;
                const int64_t wi = ((o * Cg + c) * f.k + ky) * f.k + kx;
                s += static_cast<double>(x[xi]) * w[wi];
                r.dx[xi] += static_cast<double>(dy[yi]) * w[wi];
                r.dw[wi] += static_cast<double>(dy[yi]) * x[xi];
              }
          r.y[yi] = s;
        }
  return r;
}

struct Layer {
  Conv2d conv;
  ParamSet params;
  explicit Layer(const Config& f) : conv(f.C, f.O, f.k, f.options()) {
    conv.declare(params, "conv.");
    params.allocate();
    Rng rng(11);
    conv.init(rng);
  }
};

void expect_near(const float* got, const std::vector<double>& want, const char* what,
                 const Config& f) {
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-4 * std::max(1.0, std::fabs(want[i])))
        << what << " at " << i << ": C=" << f.C << " O=" << f.O << " k=" << f.k
        << " stride=" << f.stride << " pad=" << f.pad << " dilation=" << f.dilation
        << " groups=" << f.groups;
}

TEST(Conv2dGrouped, ForwardAndGradientsMatchNaiveLoops) {
  for (const Config& f : kConfigs) {
    Layer l(f);
    const Tensor x = random_input({f.B, f.H, f.W, f.C});
    const Tensor dy = random_input({f.B, f.OH(), f.OW(), f.O}, 9);
    auto cache = l.conv.make_cache();
    const Tensor& y = l.conv.forward(x, *cache, ForwardContext());
    ASSERT_EQ(y.shape(), Shape({f.B, f.OH(), f.OW(), f.O}));
    ASSERT_EQ(l.conv.output_shape(x.shape()), y.shape());
    const float* w = l.params.param(0).f32();
    const float* bias = f.bias ? l.params.param(1).f32() : nullptr;
    const Reference ref = naive_conv(f, x.f32(), w, bias, dy.f32());
    expect_near(y.f32(), ref.y, "y", f);
    l.params.zero_grads();
    const Tensor& dx = l.conv.backward(dy, *cache, true);
    ASSERT_EQ(dx.shape(), x.shape());
    expect_near(dx.f32(), ref.dx, "dx", f);
    expect_near(l.params.grad(0).f32(), ref.dw, "dw", f);
    if (f.bias) expect_near(l.params.grad(1).f32(), ref.db, "db", f);
  }
}

TEST(Conv2dGrouped, GradientsMatchFiniteDifferences) {
  for (const Config& f : kConfigs) {
    SCOPED_TRACE(::testing::Message()
                 << "C=" << f.C << " O=" << f.O << " k=" << f.k << " stride=" << f.stride
                 << " pad=" << f.pad << " dilation=" << f.dilation << " groups=" << f.groups);
    Conv2d conv(f.C, f.O, f.k, f.options());
    GradCheckOptions opt;
    opt.max_checks = 24;
    expect_gradients_match(conv, random_input({f.B, f.H, f.W, f.C}), opt);
  }
}

// Without dx the weight gradients are the same; the path is fp32 under bf16 too.
TEST(Conv2dGrouped, WeightGradientsWithoutDxAndBf16ForwardAreTheSame) {
  const Config f = kConfigs[5];
  Layer a(f), b(f);
  const Tensor x = random_input({f.B, f.H, f.W, f.C});
  const Tensor dy = random_input({f.B, f.OH(), f.OW(), f.O}, 9);
  auto ca = a.conv.make_cache(), cb = b.conv.make_cache();
  ForwardContext bf16;
  bf16.precision = Precision::bf16;
  const Tensor& ya = a.conv.forward(x, *ca, ForwardContext());
  const Tensor& yb = b.conv.forward(x, *cb, bf16);
  EXPECT_TRUE(std::equal(ya.f32(), ya.f32() + ya.numel(), yb.f32()));
  a.params.zero_grads();
  b.params.zero_grads();
  a.conv.backward(dy, *ca, true);
  EXPECT_FALSE(b.conv.backward(dy, *cb, false).defined());
  EXPECT_TRUE(std::equal(a.params.grads(), a.params.grads() + a.params.size(), b.params.grads()));
}

// Dilation 1 and groups 1 through the options run the code the old constructor runs,
// bit for bit, and time it under the same key; a grouped layer adds no choice.
TEST(Conv2dGrouped, DefaultsRunTodaysCodeAndKeys) {
  clear_conv_choices();
  const Tensor x = random_input({2, 6, 6, 8});
  Conv2d old_conv(8, 20, 3, 1, 1, true);
  Conv2d new_conv(8, 20, 3, Conv2dOptions{.stride = 1, .padding = 1});
  ParamSet p1, p2;
  old_conv.declare(p1, "");
  new_conv.declare(p2, "");
  p1.allocate();
  p2.allocate();
  Rng r1(5), r2(5);
  old_conv.init(r1);
  new_conv.init(r2);
  auto c1 = old_conv.make_cache(), c2 = new_conv.make_cache();
  const Tensor& y1 = old_conv.forward(x, *c1, ForwardContext());
  const Tensor& y2 = new_conv.forward(x, *c2, ForwardContext());
  EXPECT_TRUE(std::equal(y1.f32(), y1.f32() + y1.numel(), y2.f32()));
  EXPECT_EQ(conv_choices().size(), 1u);
  ConvGeometry g;
  g.B = 2, g.H = 6, g.W = 6, g.C = 8, g.O = 20, g.k = 3, g.stride = 1, g.pad = 1;
  EXPECT_EQ(conv_key(g, Precision::fp32), (ConvKey{2, 6, 6, 8, 20, 3, 1, 1, 0}));
  EXPECT_TRUE(find_conv_choice(g, Precision::fp32).has_value());
  Layer grouped(kConfigs[2]);
  auto c3 = grouped.conv.make_cache();
  grouped.conv.forward(random_input({2, 8, 7, 4}), *c3, ForwardContext());
  EXPECT_EQ(conv_choices().size(), 1u);
  clear_conv_choices();
}

TEST(Conv2dGrouped, SteadyStateStepAllocatesNothing) {
  const Config f = kConfigs[3];
  Layer l(f);
  const Tensor x = random_input({f.B, f.H, f.W, f.C});
  const Tensor dy = random_input({f.B, f.OH(), f.OW(), f.O}, 9);
  auto cache = l.conv.make_cache();
  auto step = [&] {
    l.conv.forward(x, *cache, ForwardContext());
    l.conv.backward(dy, *cache, true);
  };
  step();
  const int64_t before = MemoryTracker::process().allocations();
  step();
  EXPECT_EQ(MemoryTracker::process().allocations(), before);
}

TEST(Conv2dGrouped, ParametersKeepPyTorchsShapeAndInit) {
  Layer l({1, 5, 5, 8, 16, 3, 1, 1, 1, 8, true});  // depthwise, multiplier 2
  EXPECT_EQ(l.params.info(0).shape, Shape({16, 1, 3, 3}));
  EXPECT_EQ(l.params.info(1).shape, Shape({16}));
  const float bound = 1.0f / std::sqrt(9.0f);  // fan_in = in/groups * k * k
  float wmax = 0;
  Tensor w = l.params.param(0);
  for (int64_t i = 0; i < w.numel(); ++i) wmax = std::max(wmax, std::fabs(w.f32()[i]));
  EXPECT_LE(wmax, bound);
  EXPECT_GT(wmax, 0.5f * bound);
  EXPECT_DOUBLE_EQ(l.conv.forward_flops({2, 5, 5, 8}), 2.0 * 2 * 5 * 5 * 16 * 9);
  Conv2d grouped(8, 12, 3, Conv2dOptions{.groups = 4});
  ParamSet p;
  grouped.declare(p, "");
  EXPECT_EQ(p.info(0).shape, Shape({12, 2, 3, 3}));
}

TEST(Conv2dGrouped, BadGroupsAndDilationAreErrors) {
  EXPECT_THROW(Conv2d(4, 6, 3, Conv2dOptions{.groups = 4}), Error);
  EXPECT_THROW(Conv2d(6, 4, 3, Conv2dOptions{.groups = 4}), Error);
  EXPECT_THROW(Conv2d(4, 4, 3, Conv2dOptions{.dilation = 0}), Error);
  EXPECT_THROW(Conv2d(4, 4, 3, Conv2dOptions{.groups = 0}), Error);
  // A 3x3 kernel dilated by 3 spans 7x7: a 6x6 input needs padding.
  const Conv2d conv(4, 4, 3, Conv2dOptions{.dilation = 3});
  std::string e;
  try {
    conv.output_shape({1, 6, 6, 4});
  } catch (const Error& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("dilated by 3 (7x7)"), std::string::npos) << e;
  EXPECT_EQ(conv.output_shape({1, 7, 9, 4}), Shape({1, 1, 3, 4}));
}

}  // namespace
}  // namespace braid::nn
