// Losses against naive double-precision references (log-softmax, squared error), finite
// differences, ignored rows, label and shape errors, extreme logits, the correct count.
#include "nn/loss.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gradcheck.h"

namespace braid::nn {
namespace {

using testing::random_input;

Tensor labels_of(const std::vector<int32_t>& v, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::i32);
  for (size_t i = 0; i < v.size(); ++i) t.data<int32_t>()[i] = v[i];
  return t;
}
Tensor labels_of(const std::vector<int32_t>& v) {
  return labels_of(v, Shape{static_cast<int64_t>(v.size())});
}

struct Reference {
  double loss = 0;
  std::vector<double> grad;  // (softmax - target) / count
};

// Naive log-softmax in double, row by row, against the target (1 - eps) onehot + eps / C.
Reference reference_cross_entropy(const Tensor& logits, const std::vector<int32_t>& labels,
                                  double eps = 0) {
  const int64_t C = logits.shape()[-1], N = logits.numel() / C;
  Reference ref;
  ref.grad.assign(static_cast<size_t>(N * C), 0.0);
  int64_t count = 0;
  for (int64_t r = 0; r < N; ++r) count += labels[r] != -1;
  for (int64_t r = 0; r < N; ++r) {
    if (labels[r] == -1) continue;
    const float* x = logits.f32() + r * C;
    double m = x[0];
    for (int64_t j = 1; j < C; ++j) m = std::max(m, static_cast<double>(x[j]));
    double s = 0;
    for (int64_t j = 0; j < C; ++j) s += std::exp(x[j] - m);
    const double lse = m + std::log(s);
    for (int64_t j = 0; j < C; ++j) {
      const double target = (1 - eps) * (j == labels[r]) + eps / static_cast<double>(C);
      ref.loss += target * (lse - x[j]) / static_cast<double>(count);
      ref.grad[r * C + j] = (std::exp(x[j] - lse) - target) / static_cast<double>(count);
    }
  }
  return ref;
}

TEST(SoftmaxCrossEntropy, MatchesNaiveReferenceWithIgnoredRows) {
  const Tensor logits = random_input({4, 3, 11});  // leading dims flattened: 12 rows
  const std::vector<int32_t> y = {3, -1, 0, 10, 5, 5, -1, 7, 2, 9, 1, 4};
  // Stale contents, as a reused gradient buffer has: every element must be overwritten.
  Tensor d = Tensor::empty(logits.shape());
  for (int64_t i = 0; i < d.numel(); ++i) d.f32()[i] = std::nanf("");
  const LossResult r = softmax_cross_entropy(logits, labels_of(y, {4, 3}), &d);
  const Reference ref = reference_cross_entropy(logits, y);
  EXPECT_EQ(r.count, 10);
  EXPECT_NEAR(r.loss, ref.loss, 1e-6);
  ASSERT_EQ(d.shape(), logits.shape());
  for (int64_t i = 0; i < logits.numel(); ++i) EXPECT_NEAR(d.f32()[i], ref.grad[i], 1e-7) << i;
  for (int64_t j = 0; j < 11; ++j) EXPECT_EQ(d.f32()[11 + j], 0.0f) << "ignored row has gradient";

  // Without dlogits: the same loss.
  EXPECT_EQ(softmax_cross_entropy(logits, labels_of(y, {12}), nullptr).loss, r.loss);
}

TEST(SoftmaxCrossEntropy, HandComputedValue) {
  Tensor logits = Tensor::empty({1, 2});  // two equal logits: loss ln 2, grad +-1/2
  Tensor d;
  const LossResult r = softmax_cross_entropy(logits, labels_of({1}), &d, {.grad_scale = 4.0f});
  EXPECT_NEAR(r.loss, std::log(2.0), 1e-7);
  EXPECT_FLOAT_EQ(d.f32()[0], 2.0f);  // grad_scale 4 * 0.5
  EXPECT_FLOAT_EQ(d.f32()[1], -2.0f);
}

TEST(SoftmaxCrossEntropy, GradientMatchesFiniteDifferences) {
  Tensor logits = random_input({5, 7}, 21);
  const Tensor y = labels_of({6, 0, 3, -1, 2});
  Tensor d;
  // grad_scale = count makes the gradient O(1), so an absolute tolerance is meaningful.
  const float g = 4.0f;
  softmax_cross_entropy(logits, y, &d, {.grad_scale = g});
  for (int64_t i = 0; i < logits.numel(); ++i) {
    float& v = logits.f32()[i];
    const float saved = v;
    v = saved + 1e-2f;
    const float up_at = v;
    const double up = g * softmax_cross_entropy(logits, y, nullptr).loss;
    v = saved - 1e-2f;
    const float down_at = v;
    const double down = g * softmax_cross_entropy(logits, y, nullptr).loss;
    v = saved;
    const double numeric = (up - down) / (static_cast<double>(up_at) - down_at);
    EXPECT_NEAR(d.f32()[i], numeric, 1e-3) << "d/dlogits[" << i << "]";
  }
}

TEST(SoftmaxCrossEntropy, LabelSmoothingMatchesReferenceAndFiniteDifferences) {
  Tensor logits = random_input({6, 13}, 5);
  const std::vector<int32_t> y = {12, 0, -1, 7, 7, 3};
  const CrossEntropyOptions smooth{.grad_scale = 5.0f, .label_smoothing = 0.1f};
  Tensor d;
  const LossResult r = softmax_cross_entropy(logits, labels_of(y), &d, smooth);
  const Reference ref = reference_cross_entropy(logits, y, 0.1);
  EXPECT_NEAR(r.loss, ref.loss, 1e-6);
  for (int64_t i = 0; i < logits.numel(); ++i)
    EXPECT_NEAR(d.f32()[i], 5.0 * ref.grad[i], 1e-6) << i;
  // The gradient is the derivative of the loss that is reported.
  for (int64_t i = 0; i < logits.numel(); ++i) {
    float& v = logits.f32()[i];
    const float saved = v;
    v = saved + 1e-2f;
    const float up_at = v;
    const double up = 5.0 * softmax_cross_entropy(logits, labels_of(y), nullptr, smooth).loss;
    v = saved - 1e-2f;
    const float down_at = v;
    const double down = 5.0 * softmax_cross_entropy(logits, labels_of(y), nullptr, smooth).loss;
    v = saved;
    EXPECT_NEAR(d.f32()[i], (up - down) / (static_cast<double>(up_at) - down_at), 1e-3) << i;
  }
  EXPECT_THROW(softmax_cross_entropy(logits, labels_of(y), &d, {.label_smoothing = 1.0f}), Error);
  EXPECT_THROW(softmax_cross_entropy(logits, labels_of(y), &d, {.label_smoothing = -0.1f}), Error);
}

TEST(SoftmaxCrossEntropy, LargeLogitsStayFinite) {
  Tensor logits = Tensor::empty({3, 4});
  const float v[] = {1e4f, -1e4f, 0, 5e3f, -1e4f, -1e4f, -1e4f, -1e4f, 1e4f, 1e4f - 1, 0, 0};
  for (int i = 0; i < 12; ++i) logits.f32()[i] = v[i];
  const std::vector<int32_t> y = {1, 2, 0};
  Tensor d;
  const LossResult r = softmax_cross_entropy(logits, labels_of(y), &d);
  const Reference ref = reference_cross_entropy(logits, y);
  ASSERT_TRUE(std::isfinite(r.loss));
  EXPECT_NEAR(r.loss, ref.loss, 1e-6 * ref.loss);  // ~ (2e4 + ln4/3 + ~1) / 3
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE(std::isfinite(d.f32()[i])) << i;
    EXPECT_NEAR(d.f32()[i], ref.grad[i], 1e-7) << i;
  }
}

TEST(SoftmaxCrossEntropy, MatchesReferenceOverTheWholeExponentRange) {
  // Logit gaps from 0 to -120 cover every branch of the exponential: the polynomial range,
  // the cutoff near -87 and beyond it. 37 classes: vector body plus remainder.
  Rng rng(17);
  Tensor logits = Tensor::empty({64, 37});
  for (int64_t i = 0; i < logits.numel(); ++i) logits.f32()[i] = rng.uniform(-120.0f, 0.0f);
  std::vector<int32_t> y(64);
  for (int64_t r = 0; r < 64; ++r) y[r] = static_cast<int32_t>(rng.below(37));
  Tensor d;
  const LossResult res = softmax_cross_entropy(logits, labels_of(y), &d);
  const Reference ref = reference_cross_entropy(logits, y);
  EXPECT_NEAR(res.loss, ref.loss, 1e-6);
  // Every probability, tiny ones included, within a few float ulps; the label's entry,
  // (p - 1) / N, is rounded relative to 1 / N.
  for (int64_t r = 0; r < 64; ++r)
    for (int64_t j = 0; j < 37; ++j) {
      const double want = ref.grad[r * 37 + j];
      const double tol = j == y[r] ? 1e-7 / 64 : 4e-7 * std::fabs(want) + 1e-30;
      ASSERT_NEAR(d.f32()[r * 37 + j], want, tol) << "row " << r << " class " << j;
    }
}

TEST(SoftmaxCrossEntropy, MinusInfinityIsZeroProbabilityAndNanPropagates) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor logits = Tensor::empty({1, 3});
  logits.f32()[0] = 0.0f;
  logits.f32()[1] = -inf;
  logits.f32()[2] = 1.0f;
  Tensor d;
  const LossResult r = softmax_cross_entropy(logits, labels_of({0}), &d);
  EXPECT_NEAR(r.loss, std::log(1 + std::exp(1.0)), 1e-6);
  EXPECT_EQ(d.f32()[1], 0.0f);
  for (const float nan : {std::nanf(""), -std::nanf("")}) {
    logits.f32()[1] = nan;
    EXPECT_TRUE(std::isnan(softmax_cross_entropy(logits, labels_of({0}), &d).loss)) << nan;
    logits.f32()[1] = 0.0f;
    logits.f32()[2] = nan;  // the label's own logit
    EXPECT_TRUE(std::isnan(softmax_cross_entropy(logits, labels_of({2}), &d).loss)) << nan;
    logits.f32()[2] = 1.0f;
  }
}

TEST(SoftmaxCrossEntropy, CountsCorrectRowsWithFirstMaximumWinningTies) {
  Tensor logits = Tensor::empty({5, 3});
  const float v[] = {
      0, 5, 1,  // argmax 1, label 1: correct
      2, 2, 0,  // tie: argmax 0, label 1: wrong
      2, 2, 0,  // tie: argmax 0, label 0: correct
      9, 0, 0,  // would be correct but ignored
      0, 1, 3,  // argmax 2, label 0: wrong
  };
  for (int i = 0; i < 15; ++i) logits.f32()[i] = v[i];
  const LossResult r = softmax_cross_entropy(logits, labels_of({1, 1, 0, -1, 0}), nullptr);
  EXPECT_EQ(r.correct, 2);
  EXPECT_EQ(r.count, 4);
}

TEST(SoftmaxCrossEntropy, AllRowsIgnoredGivesZero) {
  const Tensor logits = random_input({2, 3});
  Tensor d;
  const LossResult r = softmax_cross_entropy(logits, labels_of({-1, -1}), &d);
  EXPECT_EQ(r.count, 0);
  EXPECT_EQ(r.loss, 0.0);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(d.f32()[i], 0.0f);
}

TEST(SoftmaxCrossEntropy, BadLabelNamesRowValueAndClasses) {
  const Tensor logits = random_input({4, 3});
  for (const int32_t bad : {3, -2, 1000}) {
    Tensor d;
    try {
      softmax_cross_entropy(logits, labels_of({0, 1, bad, 2}), &d);
      FAIL() << bad;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("label " + std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("row 2"), std::string::npos) << msg;
      EXPECT_NE(msg.find("C = 3"), std::string::npos) << msg;
    }
    EXPECT_FALSE(d.defined()) << "dlogits touched before the labels were validated";
  }
}

TEST(SoftmaxCrossEntropy, ShapeAndTypeErrorsNameBothShapes) {
  const Tensor logits = random_input({4, 3});
  try {
    softmax_cross_entropy(logits, labels_of({0, 1, 2}), nullptr);
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[4, 3]"), std::string::npos) << msg;
  }
  EXPECT_THROW(softmax_cross_entropy(logits, random_input({4}), nullptr), Error);  // f32 labels
  EXPECT_THROW(softmax_cross_entropy(random_input({4}), labels_of({0}), nullptr), Error);
}

TEST(MseLoss, MatchesReferenceAndFiniteDifferences) {
  Tensor pred = random_input({3, 13}, 31);  // 39 elements: vector body plus remainder
  const Tensor target = random_input({3, 13}, 32);
  Tensor d;
  const double loss = mse_loss(pred, target, &d, 2.0f);
  double ref = 0;
  for (int64_t i = 0; i < pred.numel(); ++i) {
    const double diff = static_cast<double>(pred.f32()[i]) - target.f32()[i];
    ref += diff * diff / 39;
    EXPECT_NEAR(d.f32()[i], 2.0 * 2 * diff / 39, 1e-7) << i;
  }
  EXPECT_NEAR(loss, ref, 1e-12);
  EXPECT_EQ(mse_loss(pred, target, nullptr), loss);
  // Finite differences on a few coordinates.
  for (int64_t i = 0; i < pred.numel(); i += 5) {
    float& v = pred.f32()[i];
    const float saved = v;
    v = saved + 1e-2f;
    const float up_at = v;
    const double up = 2.0 * mse_loss(pred, target, nullptr);
    v = saved - 1e-2f;
    const float down_at = v;
    const double down = 2.0 * mse_loss(pred, target, nullptr);
    v = saved;
    EXPECT_NEAR(d.f32()[i], (up - down) / (static_cast<double>(up_at) - down_at), 1e-5) << i;
  }
}

TEST(MseLoss, ShapeMismatchNamesBothShapes) {
  try {
    mse_loss(random_input({4, 1}), random_input({4}), nullptr);
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[4, 1]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[4]"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace braid::nn
