// The data x tensor x pipeline mesh against one process, with ranks as threads over the
// in-process transport: every factorisation of 4 ranks (4x1x1, 2x2x1, 2x1x2, 1x2x2, 1x1x4)
// trains the GPT to one process's parameters and optimizer state within rounding, and the
// ranks' placement is the one comm::make_mesh lays out.
#include <gtest/gtest.h>

#include <mutex>

#include "comm/inproc_ranks.h"
#include "parallel/mesh_strategy.h"
#include "parallel/single_process.h"
#include "parallel/strategy_test_data.h"
#include "train/model_spec.h"

namespace braid::parallel {
namespace {

using comm::testing::message;
using comm::testing::rethrow_first;
using comm::testing::run_group;
using namespace braid::parallel::testing;  // NOLINT: the shared test data

constexpr float kLr = 0.05f;
constexpr int64_t kBatch = 8, kTokens = 16;

data::Batch tokens(int64_t step) {
  return token_batch(kBatch, kTokens, 700 + static_cast<uint64_t>(step));
}

// Replica d of D's rows: d, d + D, ... (as the distributed sampler deals them).
data::Batch rows_of(const data::Batch& g, int d, int D) {
  const int64_t rows = g.size / D;
  data::Batch b;
  b.size = rows;
  b.inputs = Tensor::empty({rows, kTokens}, DType::i32);
  b.targets = Tensor::empty({rows, kTokens}, DType::i32);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t t = 0; t < kTokens; ++t) {
      b.inputs.data<int32_t>()[i * kTokens + t] =
          g.inputs.data<int32_t>()[(d + i * D) * kTokens + t];
      b.targets.data<int32_t>()[i * kTokens + t] =
          g.targets.data<int32_t>()[(d + i * D) * kTokens + t];
    }
  return b;
}

std::unique_ptr<nn::Module> gpt() { return train::build_model("gpt-tiny", kTokens).module; }

struct Outcome {
  std::vector<float> params;
  optim::NamedTensors state;
  std::string placement;
};

Outcome mesh(const StepOptions& o, MeshShape shape, int steps) {
  Outcome out;
  std::mutex mu;
  rethrow_first(run_group(4, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    MeshStrategy s(gpt(), o, group, shape,
                   {.micro_batches = 2,
                    .schedule = PipelineSchedule::one_f_one_b,
                    .recompute = false,
                    .cut = {}});
    const int d = s.mesh().data_index;
    for (int t = 0; t < steps; ++t) s.step(rows_of(tokens(t), d, shape.data), kLr, t);
    s.synchronize();
    EXPECT_TRUE(same_bits_on_every_rank(s, s.params().params(), s.params().size()));
    s.gather_for_checkpoint();
    if (group->rank() == 0) {
      const std::lock_guard lock(mu);
      out.params = params_of(s);
      for (const auto& [name, t] : s.optimizer_state()) {
        Tensor c = Tensor::empty(t.shape(), t.dtype());
        c.copy_from(t);
        out.state.emplace_back(name, c);
      }
      out.placement = s.describe_placement();
    }
  }));
  return out;
}

TEST(Mesh, EveryFactorisationOfFourRanksTrainsToOneProcesssParameters) {
  StepOptions o = options("sgd");
  o.clip_grad_norm = 1.0f;
  SingleProcess one(gpt(), o);
  for (int t = 0; t < 3; ++t) one.step(tokens(t), kLr, t);
  const std::vector<float> want = params_of(one);
  const optim::NamedTensors want_state = one.optimizer_state();
  const float tol = 1e-5f * largest(want);
  for (const MeshShape shape : {MeshShape{4, 1, 1}, MeshShape{2, 2, 1}, MeshShape{2, 1, 2},
                                MeshShape{1, 2, 2}, MeshShape{1, 1, 4}}) {
    const std::string what = std::to_string(shape.data) + "x" + std::to_string(shape.tensor) + "x" +
                             std::to_string(shape.pipeline);
    const Outcome got = mesh(o, shape, 3);
    ASSERT_EQ(got.params.size(), want.size()) << what;
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got.params[i], want[i], tol) << what << " at float " << i;
    ASSERT_EQ(got.state.size(), want_state.size()) << what;
    for (size_t k = 0; k < want_state.size(); ++k) {
      const Tensor& a = got.state[k].second;
      const Tensor& b = want_state[k].second;
      ASSERT_EQ(got.state[k].first, want_state[k].first) << what;
      ASSERT_EQ(a.shape(), b.shape()) << what;
      if (a.dtype() != DType::f32) continue;
      for (int64_t i = 0; i < a.numel(); ++i)
        ASSERT_NEAR(a.f32()[i], b.f32()[i], 1e-4f) << what << " " << got.state[k].first << " " << i;
    }
  }
}

TEST(Mesh, PlacementIsTensorFastestAndPrinted) {
  const Outcome got = mesh(options("sgd"), {2, 2, 1}, 1);
  EXPECT_NE(got.placement.find("2 data x 2 tensor x 1 pipeline"), std::string::npos)
      << got.placement;
  EXPECT_NE(got.placement.find("rank 1 = (data 0, tensor 1, stage 0)"), std::string::npos)
      << got.placement;
  EXPECT_NE(got.placement.find("rank 2 = (data 1, tensor 0, stage 0)"), std::string::npos)
      << got.placement;
}

TEST(Mesh, AxesThatDoNotMultiplyToTheRanksAreRefused) {
  const auto results = run_group(4, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    MeshStrategy s(gpt(), options("sgd"), group, {3, 1, 1}, {});
  });
  EXPECT_NE(message(results[0]).find("3 data x 1 tensor x 1 pipeline = 3 ranks, but the job has 4"),
            std::string::npos)
      << message(results[0]);
}

}  // namespace
}  // namespace braid::parallel
