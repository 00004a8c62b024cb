// Elastic training's premise for DDP (Strategy::make_transactional): a step that fails in
// its last bucket's allreduce, after every other bucket's succeeded, leaves the parameters
// and the optimizer state exactly as the step before left them, so a rollback to that
// step needs no copy of them. Ranks are threads over the in-process transport; one rank
// closes its transport (as a crashed process) once its other buckets are reduced.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "comm/inproc_ranks.h"
#include "comm/inproc_transport.h"
#include "parallel/ddp.h"
#include "parallel/strategy_test_data.h"
#include "train/model_spec.h"

namespace braid::parallel {
namespace {

using comm::testing::run_group;
using namespace braid::parallel::testing;  // NOLINT: the shared test data

std::vector<float> optimizer_floats(const Strategy& s) {
  std::vector<float> out;
  for (const auto& [name, t] : s.optimizer_state())
    if (t.dtype() == DType::f32) out.insert(out.end(), t.f32(), t.f32() + t.numel());
  return out;
}

// Runs 3 ranks for two good steps and a third that rank 2 abandons in its last bucket;
// returns whether every survivor's state after the failed step was that of step two.
bool failed_step_changes_nothing(bool transactional) {
  constexpr int n = 3, victim = 2;
  std::atomic<int> unchanged{0}, failed{0};
  DdpOptions d;
  d.bucket_bytes = d.first_bucket_bytes = 4096;  // several buckets
  auto errors = run_group(
      n,
      [&](comm::Group& world) {
        auto group = world.split(0, world.rank());
        Ddp s(train::build_model(small_cnn()).module, options("adamw"), group, d);
        s.make_transactional(transactional);
        EXPECT_GE(s.buckets().size(), 2u);
        for (int t = 0; t < 2; ++t) s.step(shard(global_batch(12, t), group->rank(), n), 0.05f, t);
        const std::vector<float> params = params_of(s), moments = optimizer_floats(s);
        if (group->rank() == victim) {
          // The first layers' ranges are final last: their bucket is the last reduced. At
          // the first of its ranges (so before it can start), wait for the other buckets
          // (they then succeed on every rank), then die.
          int64_t last_end = 0;
          for (const Ddp::Bucket& b : s.buckets())
            if (b.begin == 0) last_end = b.end;
          s.params().add_ready_listener(
              [&, last_end, done = false](int64_t begin, int64_t) mutable {
                if (done || begin >= last_end) return;
                done = true;
                for (const Ddp::Bucket& b : s.buckets())
                  if (b.begin != 0) b.handle.wait();
                dynamic_cast<comm::InprocTransport&>(world.transport()).close();
                // Its shared-memory allreduce reads peers' buffers in place, with no message to
                // fail: the rank leaves the step as a crashed process would.
                throw IoError("rank 2 crashed");
              });
        }
        try {
          s.step(shard(global_batch(12, 2), group->rank(), n), 0.05f, 2);
        } catch (const Error&) {
          ++failed;
        }
        if (group->rank() != victim && params_of(s) == params && optimizer_floats(s) == moments)
          ++unchanged;
      },
      std::chrono::milliseconds(2000));
  for (const auto& e : errors) EXPECT_FALSE(e) << comm::testing::message(e);
  EXPECT_EQ(failed.load(), n) << "every rank's third step should have failed";
  return unchanged.load() == n - 1;
}

TEST(DdpTransactional, AStepLostInItsLastBucketChangesNoParameterAndNoOptimizerState) {
  EXPECT_TRUE(failed_step_changes_nothing(/*transactional=*/true));
}

// The reference the test above is worth something against: DDP's usual step fuses each
// bucket's update into backward, so the same failure leaves the earlier buckets updated.
TEST(DdpTransactional, TheUsualFusedStepIsChangedByTheSameFailure) {
  EXPECT_FALSE(failed_step_changes_nothing(/*transactional=*/false));
}

}  // namespace
}  // namespace braid::parallel
