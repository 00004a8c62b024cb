// The codecs under the strategies that use the gradient reducer, with ranks as threads over
// the in-process transport: ZeRO stages 1 and 2 with a codec train to DDP's parameters with
// the same codec bit for bit (a compressing codec's reduce-scatter gives the bits of its
// allreduce's chunk; the casts' native reduce-scatter adds in another order at 3 ranks, so
// within rounding there), which also proves the alignment gaps between parameters stay
// zero (a lossy decode writes them, and backward never does); local SGD with a compressing codec
// keeps every rank's parameters identical and near the fp32 run's; a mesh's data axis with a codec
// does too; every one reports the bytes it sent.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "comm/inproc_ranks.h"
#include "parallel/ddp.h"
#include "parallel/local_sgd.h"
#include "parallel/mesh_strategy.h"
#include "parallel/strategy_test_data.h"
#include "parallel/zero.h"
#include "train/model_spec.h"

namespace braid::parallel {
namespace {

using comm::testing::rethrow_first;
using comm::testing::run_group;
using namespace braid::parallel::testing;  // NOLINT: the shared test data

constexpr float kLr = 0.05f;
constexpr int64_t kBatch = 24;
constexpr int kSteps = 4;

struct Trained {
  std::vector<float> params;  // rank 0's
  CodecReport report;         // rank 0's last step
};

// `stage` 0: DDP; 1-2: ZeRO. Both cut the same buckets (stage 2 caps its own at 600 bytes
// for this model, so both use 600).
Trained data_parallel(const std::string& codec, int stage, int n) {
  Trained out;
  std::mutex mu;
  rethrow_first(run_group(n, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    DataParallelOptions common;
    common.bucket_bytes = 600;
    common.first_bucket_bytes = 600;
    common.codec.name = codec;
    common.codec.start_iter = 1;  // powersgd: compressed from the second step
    std::unique_ptr<Strategy> s;
    if (stage == 0) {
      DdpOptions d;
      static_cast<DataParallelOptions&>(d) = common;
      // ZeRO's buffers are private; shared ones would take the shared-memory allreduce,
      // which at 3 ranks adds in another order than the ring.
      d.shared_gradients = false;
      s = std::make_unique<Ddp>(train::build_model(small_mlp()).module, options("sgd"), group, d);
    } else {
      ZeroOptions z;
      static_cast<DataParallelOptions&>(z) = common;
      z.stage = stage;
      s = std::make_unique<Zero>(train::build_model(small_mlp()).module, options("sgd"), group, z);
    }
    for (int t = 0; t < kSteps; ++t)
      s->step(shard(global_batch(kBatch, t), group->rank(), n), kLr, t);
    s->synchronize();
    EXPECT_TRUE(same_bits_on_every_rank(*s, s->params().params(), s->params().size()));
    if (group->rank() == 0) {
      const std::lock_guard lock(mu);
      out.params = params_of(*s);
      out.report = s->last_codec_report();
    }
  }));
  return out;
}

class CodecUnderZero : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(CodecUnderZero, StagesOneAndTwoEqualDdpWithTheSameCodecBitwise) {
  const auto& [codec, n] = GetParam();
  const Trained ddp = data_parallel(codec, 0, n);
  // The casts reduce-scatter natively, which at 3 ranks adds in another order than the
  // allreduce: within rounding there (as ZeRO's fp32), bitwise at 2 (one addition).
  const bool bitwise = n == 2 || (codec != "none" && codec != "bf16");
  for (int stage : {1, 2}) {
    const Trained zero = data_parallel(codec, stage, n);
    const std::string what = "zero_stage " + std::to_string(stage) + " against ddp, codec " + codec;
    if (bitwise) {
      expect_bitwise(zero.params, ddp.params, what.c_str());
    } else {
      ASSERT_EQ(zero.params.size(), ddp.params.size());
      for (size_t i = 0; i < ddp.params.size(); ++i)
        ASSERT_NEAR(zero.params[i], ddp.params[i],
                    (codec == "bf16" ? 1e-3f : 1e-5f) * largest(ddp.params))
            << what << " " << i;
    }
    EXPECT_GT(zero.report.wire_bytes, 0) << codec;
  }
  if (codec != "none") {
    // The codec changed what was sent: not the fp32 run's bits.
    const Trained fp32 = data_parallel("none", 0, n);
    EXPECT_NE(std::memcmp(fp32.params.data(), ddp.params.data(), ddp.params.size() * 4), 0)
        << codec;
    EXPECT_GT(ddp.report.ratio(), 1.5) << codec;
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, CodecUnderZero,
                         ::testing::Combine(::testing::Values("none", "bf16", "int8", "sign",
                                                              "topk", "powersgd"),
                                            ::testing::Values(2, 3)));

std::vector<float> local_sgd(const std::string& codec, int n, CodecReport* report) {
  std::vector<float> out;
  std::mutex mu;
  rethrow_first(run_group(n, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    DdpOptions d;
    d.bucket_bytes = 4000;
    d.first_bucket_bytes = 2000;
    d.codec.name = codec;
    LocalSgd s(train::build_model(small_mlp()).module, options("sgd"), group, {.period = 2}, d);
    for (int t = 0; t < 6; ++t) s.step(shard(global_batch(kBatch, t), group->rank(), n), kLr, t);
    // Right after an average (step 6 ends one): every rank holds the same bits.
    EXPECT_TRUE(same_bits_on_every_rank(s, s.params().params(), s.params().size()));
    if (group->rank() == 0) {
      const std::lock_guard lock(mu);
      out = params_of(s);
      *report = s.last_codec_report();
    }
  }));
  return out;
}

TEST(CodecUnderLocalSgd, AveragesOfCompressedChangesKeepRanksIdenticalAndNearFp32) {
  CodecReport fp32_report, int8_report;
  const std::vector<float> fp32 = local_sgd("none", 3, &fp32_report);
  const std::vector<float> int8 = local_sgd("int8", 3, &int8_report);
  ASSERT_EQ(fp32.size(), int8.size());
  // int8 keeps each change within half a step of 1/127 of its chunk's largest; three
  // averages of changes of about lr x gradient stay far inside 1e-3 of the weights' scale.
  double worst = 0;
  for (size_t i = 0; i < fp32.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::fabs(fp32[i] - int8[i])));
  EXPECT_LT(worst, 2e-3 * largest(fp32));
  EXPECT_GT(worst, 0.0) << "int8 left no trace: the codec was not used";
  EXPECT_GT(int8_report.ratio(), 3.0);
  EXPECT_NEAR(fp32_report.ratio(), 1.0, 1e-9);
}

std::vector<float> mesh_params(const std::string& codec, CodecReport* report) {
  std::vector<float> out;
  std::mutex mu;
  rethrow_first(run_group(4, [&](comm::Group& world) {
    auto group = world.split(0, world.rank());
    PipelineOptions p{.micro_batches = 2,
                      .schedule = PipelineSchedule::one_f_one_b,
                      .recompute = false,
                      .cut = {}};
    p.data_bucket_bytes = 2000;
    p.data_codec.name = codec;
    MeshStrategy s(train::build_model(small_mlp()).module, options("sgd"), group,
                   MeshShape{2, 1, 2}, p);
    const int d = s.mesh().data_index;
    for (int t = 0; t < 3; ++t) s.step(shard(global_batch(kBatch, t), d, 2), kLr, t);
    const CodecReport last = s.last_codec_report();
    s.synchronize();
    EXPECT_TRUE(same_bits_on_every_rank(s, s.params().params(), s.params().size()));
    if (group->rank() == 0) {
      const std::lock_guard lock(mu);
      out = params_of(s);
      *report = last;
    }
  }));
  return out;
}

TEST(CodecUnderMesh, TheDataAxisCompressesAndTheReplicasAgree) {
  CodecReport fp32_report, int8_report;
  const std::vector<float> fp32 = mesh_params("none", &fp32_report);
  const std::vector<float> int8 = mesh_params("int8", &int8_report);
  ASSERT_EQ(fp32.size(), int8.size());
  double worst = 0;
  for (size_t i = 0; i < fp32.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::fabs(fp32[i] - int8[i])));
  EXPECT_LT(worst, 2e-3 * largest(fp32));
  EXPECT_GT(worst, 0.0) << "int8 left no trace: the data axis did not use the codec";
  EXPECT_GT(int8_report.wire_bytes, 0);
  EXPECT_GT(int8_report.ratio(), 3.0);
}

}  // namespace
}  // namespace braid::parallel
