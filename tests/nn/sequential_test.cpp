// Sequential's backward: children in front of the first one with parameters run no
// backward when the caller needs no input gradient (mlp's Flatten before its first
// Linear), the first one with parameters is asked for no input gradient, and the weight
// gradients are exactly those of a full backward.
#include "nn/sequential.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "gradcheck.h"
#include "nn/activations.h"
#include "nn/conv2d.h"
#include "nn/flatten.h"
#include "nn/linear.h"
#include "nn/pad.h"
#include "nn/params.h"

namespace braid::nn {
namespace {

using testing::random_input;

// Identity that records how backward was called; it declares one parameter when asked.
class Spy : public Module {
 public:
  explicit Spy(bool learns) : learns_(learns) {}
  std::string_view kind() const override { return "Spy"; }
  void declare(ParamSet& params, const std::string& prefix) override {
    if (learns_) params.declare(prefix + "weight", Shape{1}, true);
  }
  Shape output_shape(const Shape& in) const override { return in; }
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext&) override {
    cache.out = x;
    return cache.out;
  }
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override {
    calls.push_back(need_dx);
    cache.dx = dy;
    return need_dx ? cache.dx : no_grad();
  }
  std::vector<bool> calls;

 private:
  bool learns_;
};

TEST(Sequential, NoBackwardInFrontOfTheFirstChildThatLearns) {
  std::vector<std::unique_ptr<Module>> children;
  children.push_back(std::make_unique<Spy>(false));
  children.push_back(std::make_unique<Spy>(true));
  children.push_back(std::make_unique<Spy>(false));
  auto* in_front = static_cast<Spy*>(children[0].get());
  auto* learner = static_cast<Spy*>(children[1].get());
  auto* behind = static_cast<Spy*>(children[2].get());
  Sequential net(std::move(children));
  ParamSet params;
  net.declare(params, "");
  params.allocate();
  auto cache = net.make_cache();
  const Tensor x = random_input({2, 3});
  net.forward(x, *cache, ForwardContext());

  EXPECT_FALSE(net.backward(x, *cache, false).defined());
  EXPECT_EQ(in_front->calls, std::vector<bool>{});
  EXPECT_EQ(learner->calls, std::vector<bool>{false});
  EXPECT_EQ(behind->calls, std::vector<bool>{true});

  // A caller that wants dL/dx gets it through every child.
  const Tensor& dx = net.backward(x, *cache, true);
  EXPECT_EQ(dx.raw(), x.raw());
  EXPECT_EQ(in_front->calls, std::vector<bool>{true});
  EXPECT_EQ(learner->calls, (std::vector<bool>{false, true}));
}

TEST(Sequential, SkippedInputGradientLeavesWeightGradientsExact) {
  auto build = [] {
    std::vector<std::unique_ptr<Module>> children;
    children.push_back(std::make_unique<Flatten>());
    children.push_back(std::make_unique<Linear>(24, 16));
    children.push_back(std::make_unique<Linear>(16, 5));
    return std::make_unique<Sequential>(std::move(children));
  };
  const Tensor x = random_input({4, 2, 3, 4});
  const Tensor dy = random_input({4, 5}, 7);
  std::vector<std::vector<float>> grads;
  for (bool need_dx : {false, true}) {
    auto net = build();
    ParamSet params;
    net->declare(params, "");
    params.allocate();
    Rng rng(3, 0, 0);
    net->init(rng);
    auto cache = net->make_cache();
    net->forward(x, *cache, ForwardContext());
    params.zero_grads();
    const Tensor& dx = net->backward(dy, *cache, need_dx);
    EXPECT_EQ(dx.defined(), need_dx);
    const float* g = params.grads();
    grads.emplace_back(g, g + params.size());
  }
  EXPECT_EQ(grads[0], grads[1]);
}

// A block whose body changes the shape (a strided convolution) with a projection shortcut,
// and a plain block, checked against finite differences: the input's gradient is the sum of
// both paths', every parameter's its own.
TEST(Residual, ShortcutAndBodyGradientsMatchFiniteDifferences) {
  std::vector<std::unique_ptr<Module>> body, side;
  body.push_back(std::make_unique<Conv2d>(2, 3, 3, 2, 1, false));
  body.push_back(std::make_unique<ReLU>());
  side.push_back(std::make_unique<Conv2d>(2, 3, 1, 2, 0, true));
  Residual projected(std::make_unique<Sequential>(std::move(body)),
                     std::make_unique<Sequential>(std::move(side)));
  EXPECT_EQ(projected.output_shape(Shape{2, 6, 6, 2}), (Shape{2, 3, 3, 3}));
  testing::expect_gradients_match(projected, random_input(Shape{2, 6, 6, 2}));
  ParamSet names;
  projected.declare(names, "");
  EXPECT_EQ(names.layout()[0].name, "body.0.weight");
  EXPECT_EQ(names.layout()[1].name, "shortcut.0.weight");

  std::vector<std::unique_ptr<Module>> plain;
  plain.push_back(std::make_unique<Linear>(5, 5));
  Residual identity(std::make_unique<Sequential>(std::move(plain)));
  testing::expect_gradients_match(identity, random_input(Shape{3, 5}));

  std::vector<std::unique_ptr<Module>> wrong;
  wrong.push_back(std::make_unique<Linear>(5, 4));
  Residual mismatch(std::make_unique<Sequential>(std::move(wrong)));
  EXPECT_THROW(mismatch.output_shape(Shape{3, 5}), Error) << "no shortcut to make 5 into 4";
}

TEST(ZeroPad2d, PadsWithZerosAndCropsTheGradient) {
  ZeroPad2d pad(2);
  Tensor x = random_input(Shape{1, 2, 3, 2});
  auto cache = pad.make_cache();
  const Tensor& y = pad.forward(x, *cache, {});
  ASSERT_EQ(y.shape(), (Shape{1, 6, 7, 2}));
  for (int64_t h = 0; h < 6; ++h)
    for (int64_t w = 0; w < 7; ++w)
      for (int64_t c = 0; c < 2; ++c) {
        const bool inside = h >= 2 && h < 4 && w >= 2 && w < 5;
        EXPECT_EQ(y.f32()[(h * 7 + w) * 2 + c],
                  inside ? x.f32()[((h - 2) * 3 + w - 2) * 2 + c] : 0.0f)
            << h << "," << w << "," << c;
      }
  testing::expect_gradients_match(pad, random_input(Shape{2, 3, 4, 3}));
}

}  // namespace
}  // namespace braid::nn