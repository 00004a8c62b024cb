// DDP with 16-bit gradients on the wire (comm_dtype bf16 / fp16). With two ranks every
// reduced element is round16(round16(g0) + round16(g1)) with the addition in fp32 (the
// allreduce adds two fp32-widened values and rounds once), so one SGD step is predictable
// exactly from each rank's own gradient; with four ranks each hop rounds again, and the
// run stays within the 16-bit format's bound of fp32's. Deterministic mode refuses it.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "comm/inproc_ranks.h"
#include "core/convert.h"
#include "parallel/ddp.h"
#include "parallel/single_process.h"
#include "parallel/strategy_test_data.h"
#include "train/model_spec.h"

namespace braid::parallel {
namespace {

using comm::testing::rethrow_first;
using comm::testing::run_group;
using namespace braid::parallel::testing;  // NOLINT: the shared test data

constexpr float kLr = 0.05f;

// Plain SGD: a step moves each parameter by exactly lr x its reduced gradient.
StepOptions plain_sgd() {
  StepOptions o = options("sgd");
  o.optimizer.momentum = 0;
  o.optimizer.weight_decay = 0;
  return o;
}

float round16(DType dtype, float x) {
  return dtype == DType::bf16 ? bf16_to_float(float_to_bf16(x)) : half_to_float(float_to_half(x));
}

// Parameters on rank 0 after `steps` DDP steps on n thread-ranks.
std::vector<float> ddp_params(const StepOptions& o, int n, int steps, DType comm_dtype) {
  std::vector<float> out;
  std::mutex mu;
  rethrow_first(run_group(n, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    DdpOptions d;
    d.codec.name = comm_dtype == DType::f32 ? "none" : comm_dtype == DType::bf16 ? "bf16" : "fp16";
    d.bucket_bytes = 4096;  // several buckets
    d.first_bucket_bytes = 2048;
    Ddp s(train::build_model(small_mlp()).module, o, group, d);
    for (int t = 0; t < steps; ++t) s.step(shard(global_batch(16, t), group->rank(), n), kLr, t);
    EXPECT_TRUE(same_bits_on_every_rank(s, s.params().params(), s.params().size()));
    if (group->rank() == 0) {
      const std::lock_guard lock(mu);
      out = params_of(s);
    }
  }));
  return out;
}

TEST(DdpCommDtype, TwoRanksRoundEachGradientAndTheirSumOnce) {
  for (const DType dtype : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    // Each rank's gradient of step 0, from a one-process step at rate 0 on its shard.
    std::vector<std::vector<float>> grads;
    std::vector<float> initial;
    for (int r = 0; r < 2; ++r) {
      SingleProcess s(train::build_model(small_mlp()).module, plain_sgd());
      s.step(shard(global_batch(16, 0), r, 2), 0.0f, 0);
      grads.emplace_back(s.params().grads(), s.params().grads() + s.params().size());
      initial = params_of(s);
    }
    const std::vector<float> got = ddp_params(plain_sgd(), 2, 1, dtype);
    ASSERT_EQ(got.size(), initial.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const float sum = round16(dtype, round16(dtype, grads[0][i]) + round16(dtype, grads[1][i]));
      const float want = initial[i] - kLr * (sum * 0.5f);
      // The update itself is one fp32 operation: an ulp or two of its operands.
      const float tol = 2.5e-7f * (std::fabs(initial[i]) + std::fabs(kLr * sum * 0.5f)) + 1e-30f;
      ASSERT_NEAR(got[i], want, tol) << "parameter float " << i;
    }
  }
}

TEST(DdpCommDtype, FourRanksStayWithinTheFormatOfFp32) {
  const auto fp32 = ddp_params(options("sgd"), 4, 3, DType::f32);
  const float scale = largest(fp32);
  for (const DType dtype : {DType::bf16, DType::f16}) {
    const auto got = ddp_params(options("sgd"), 4, 3, dtype);
    ASSERT_EQ(got.size(), fp32.size());
    // Three steps of lr 0.05 move parameters by ~1e-2 of the largest; each reduced gradient
    // is within a few 16-bit roundings (2^-8 for bf16) of fp32's: 1e-3 of the largest
    // parameter bounds the difference with room, while a lost or doubled bucket would
    // move them by the whole step.
    double max_diff = 0;
    for (size_t i = 0; i < got.size(); ++i)
      max_diff = std::max(max_diff, std::fabs(static_cast<double>(got[i] - fp32[i])));
    EXPECT_LT(max_diff, 1e-3 * scale) << dtype_name(dtype);
    EXPECT_GT(max_diff, 0) << dtype_name(dtype) << ": the gradients never went 16-bit";
  }
}

TEST(DdpCommDtype, DeterministicModeRefusesIt) {
  StepOptions o = options("sgd");
  o.deterministic = true;
  const auto results = run_group(2, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    DdpOptions d;
    d.codec.name = "bf16";
    try {
      Ddp s(train::build_model(small_mlp()).module, o, group, d);
      ADD_FAILURE() << "deterministic with comm_dtype bf16 was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("deterministic mode sums every bucket in rank order"),
                std::string::npos)
          << e.what();
    }
  });
  (void)results;
}

}  // namespace
}  // namespace braid::parallel
