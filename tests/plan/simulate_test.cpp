// The step simulator against closed forms: the pipeline bubble (P-1)/(M+P-1), DDP's
// allreduce after backward and its overlap worked out by hand, ZeRO's bytes 1x/1x/1.5x of
// DDP's, memory by category; and the task graph's own rules.
#include "plan/simulate.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "plan/collective_cost.h"
#include "plan/event_sim.h"

namespace braid::plan {
namespace {

using parallel::PipelineSchedule;

// `units` alike: forward f and backward b seconds a sample, `params` parameters and
// `act` bytes kept a sample each; outputs of `out` bytes a sample.
ModelProfile even_model(int units, double f, double b, double params, double act = 1000,
                        double out = 100) {
  ModelProfile p;
  p.model = "even";
  p.threads = 1;
  for (int i = 0; i < units; ++i) {
    UnitProfile u;
    u.name = std::to_string(i);
    u.kind = "Linear";
    u.forward = {0, f};
    u.backward = {0, b};
    u.params = params;
    u.activation_bytes_per_sample = act;
    u.output_bytes_per_sample = out;
    p.units.push_back(u);
  }
  return p;
}

Cluster one_host(int ranks, Link link = {0, 1e30}, double memory = 1e15) {
  Cluster c;
  c.hosts = 1;
  c.ranks_per_host = ranks;
  c.cores_per_host = ranks;
  c.memory_per_host = memory;
  c.intra = c.inter = link;
  return c;
}

PlanConfig pipeline(int P, int M, PipelineSchedule s, int chunks = 1) {
  PlanConfig c;
  c.pipeline = P;
  c.micro_batches = M;
  c.schedule = s;
  c.chunks = chunks;
  return c;
}

TEST(Simulate, PipelineBubbleIsTheClosedFormForEqualStages) {
  for (PipelineSchedule s : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b}) {
    for (int P : {2, 4}) {
      for (int M : {1, 4, 8}) {
        const ModelProfile p = even_model(P, 1e-3, 2e-3, 0);
        const Prediction r = simulate(p, one_host(P), pipeline(P, M, s), M);
        // Each micro-batch is one sample: a stage's work is M x 3 ms.
        const double work = M * 3e-3;
        EXPECT_NEAR(r.step_s, work * (M + P - 1) / M, 1e-12) << P << " " << M;
        EXPECT_NEAR(r.compute_s, work, 1e-12);
        EXPECT_NEAR(r.bubble_s / r.step_s, parallel::theoretical_bubble(P, M), 1e-9)
            << "P " << P << " M " << M << " " << parallel::schedule_name(s);
        EXPECT_NEAR(r.exposed_comm_s, 0, 1e-12);
      }
    }
  }
}

TEST(Simulate, InterleavedBubbleShrinksByTheChunks) {
  // Equal forward and backward, as Narayanan et al.'s formula takes them.
  const int P = 2, v = 2;
  for (int M : {2, 4, 8}) {
    const ModelProfile p = even_model(P * v, 1e-3, 1e-3, 0);
    const Prediction r =
        simulate(p, one_host(P), pipeline(P, M, PipelineSchedule::interleaved, v), M);
    EXPECT_NEAR(r.bubble_s / r.step_s, parallel::theoretical_bubble(P, M, v), 1e-9) << M;
  }
}

TEST(Simulate, PipelineSendsDelayEachHop) {
  // One micro-batch through 3 stages: the forward crosses 2 links and the backward 2.
  const Link link{1e-3, 1e6};  // 1 ms + 100 bytes / 1 MB/s = 1.1 ms a hop
  const ModelProfile p = even_model(3, 1e-3, 1e-3, 0, 1000, 100);
  const Prediction r = simulate(p, one_host(3, link), pipeline(3, 1, PipelineSchedule::gpipe), 1);
  EXPECT_NEAR(r.step_s, 6e-3 + 4 * 1.1e-3, 1e-12);
  EXPECT_NEAR(r.exposed_comm_s, 4 * 1.1e-3, 1e-12);
}

TEST(Simulate, DdpReducesAfterTheLastBackwardOfOneUnit) {
  // One unit: nothing to overlap with. Step = forward + backward + allreduce + update.
  const Link link{5e-6, 1e9};
  const double params = 1 << 20;  // 4 MiB of gradients: a 1 MiB first bucket, then the rest
  ModelProfile p = even_model(1, 1e-3, 2e-3, params);
  p.optimizer_s_per_param = 1e-9;
  PlanConfig c;
  c.data = 4;
  const Prediction r = simulate(p, one_host(4, link), c, 4 * 8);
  // Buckets as DDP cuts them: the first 1 MiB, then the other 3 MiB.
  auto cost = [&](double bytes) {
    return best_collective(Collective::allreduce, bytes, {4, 4, 1}, one_host(4, link)).seconds;
  };
  const double allreduce = cost(1 << 20) + cost(4 * params - (1 << 20));
  EXPECT_NEAR(r.step_s, 8 * 3e-3 + allreduce + params * 1e-9, 1e-12);
  EXPECT_NEAR(r.exposed_comm_s, allreduce, 1e-12);
  EXPECT_NEAR(r.samples_per_s, 32 / r.step_s, 1e-9);
}

TEST(Simulate, DdpOverlapsALaterBucketWithEarlierBackwards) {
  // Two units of 2 MiB of gradients each: the second unit's bucket reduces while the first
  // unit's backward runs. By hand: forwards 2f, backward of unit 1, then the later of
  // (backward of unit 0) and (its bucket's allreduce), then unit 0's allreduce.
  const Link link{0, 1e9};
  const double params = 512 * 1024;  // 2 MiB each: the 1 MiB cap closes a bucket per unit
  const ModelProfile p = even_model(2, 1e-3, 1e-3, params);
  PlanConfig c;
  c.data = 2;
  const Cluster cl = one_host(2, link);
  const double ar = collective_seconds(Collective::allreduce, Algorithm::ring, 4 * params, 2, link);
  ASSERT_GT(ar, 0);
  for (double per_sample : {1e-4, 1e-3}) {  // allreduce shorter, then longer than a backward
    ModelProfile q = p;
    for (UnitProfile& u : q.units) u.backward = {0, per_sample};
    const Prediction r = simulate(q, cl, c, 2);
    const double b = per_sample;
    EXPECT_NEAR(r.step_s, 2e-3 + b + std::max(b, ar) + ar, 1e-12) << per_sample;
  }
}

TEST(Simulate, ACodecSendsItsRatioAndAddsItsComputeToTheReduction) {
  // One unit: its buckets reduce after backward, exposed. A codec sending a quarter of the
  // bytes and costing 1 ns a float adds exactly that to each bucket's reduction.
  const Link link{5e-6, 1e9};
  const double params = 1 << 20;
  const ModelProfile p = even_model(1, 1e-3, 2e-3, params);
  PlanConfig c;
  c.data = 4;
  const Prediction plain = simulate(p, one_host(4, link), c, 32);
  c.codec = "int8";
  c.wire_ratio = 0.25;
  c.codec_s_per_float = 1e-9;
  const Prediction coded = simulate(p, one_host(4, link), c, 32);
  EXPECT_DOUBLE_EQ(coded.comm_bytes, 0.25 * plain.comm_bytes);
  auto cost = [&](double bytes) {
    return best_collective(Collective::allreduce, bytes, {4, 4, 1}, one_host(4, link)).seconds;
  };
  const double first = 1 << 20, rest = 4 * params - first;  // DDP's two buckets
  EXPECT_NEAR(coded.step_s, 8 * 3e-3 + cost(0.25 * first) + cost(0.25 * rest) + params * 1e-9,
              1e-12);
}

TEST(Simulate, ZeroMovesDdpBytesThenHalfAgainAtStageThree) {
  const ModelProfile p = even_model(6, 1e-3, 2e-3, 3e6);
  const Cluster cl = one_host(4, {1e-5, 1e9});
  double bytes[4];
  for (int stage = 0; stage <= 3; ++stage) {
    PlanConfig c;
    c.data = 4;
    c.zero_stage = stage;
    bytes[stage] = simulate(p, cl, c, 16).comm_bytes;
  }
  EXPECT_GT(bytes[0], 0);
  EXPECT_DOUBLE_EQ(bytes[1], bytes[0]);
  EXPECT_DOUBLE_EQ(bytes[2], bytes[0]);
  EXPECT_DOUBLE_EQ(bytes[3], 1.5 * bytes[0]);
}

TEST(Simulate, ZeroThreeKeepsItsLastBucketsGatheredForBackward) {
  // A small head (0.4 MB) after six 12 MB blocks: it fits the 4 buckets zero.cpp keeps
  // gathered after forward, so backward does not gather it again.
  ModelProfile p = even_model(6, 1e-3, 2e-3, 3e6);
  UnitProfile head = p.units.back();
  head.name = "head";
  head.params = 1e5;
  p.units.push_back(head);
  const Cluster cl = one_host(4, {1e-5, 1e9});
  PlanConfig c;
  c.data = 4;
  const double ddp = simulate(p, cl, c, 16).comm_bytes;
  c.zero_stage = 3;
  const double zero3 = simulate(p, cl, c, 16).comm_bytes;
  EXPECT_DOUBLE_EQ(zero3, 1.5 * ddp - 0.75 * 4e5);  // a 4-rank ring allgather sends 3/4
}

TEST(Simulate, MemoryByCategoryFollowsTheZeroStage) {
  const double params = 1e6;
  const ModelProfile p = even_model(4, 1e-3, 2e-3, params / 4, 1000);
  const Cluster cl = one_host(4);
  RankMemory m[4];
  for (int stage = 0; stage <= 3; ++stage) {
    PlanConfig c;
    c.data = 4;
    c.zero_stage = stage;
    c.bucket_bytes = 1 << 20;
    m[stage] = simulate(p, cl, c, 8).memory;
  }
  EXPECT_DOUBLE_EQ(m[0].params, 4 * params);
  EXPECT_DOUBLE_EQ(m[0].grads, 4 * params);
  EXPECT_DOUBLE_EQ(m[0].optimizer, 8 * params);
  EXPECT_DOUBLE_EQ(m[1].optimizer, 8 * params / 4);
  EXPECT_DOUBLE_EQ(m[1].grads, 4 * params);
  // zero.cpp's windows: 2 buckets of gradients, 4 of gathered parameters (1 MiB buckets).
  EXPECT_DOUBLE_EQ(m[2].grads, 4 * params / 4 + 2 * (1 << 20));
  EXPECT_DOUBLE_EQ(m[3].params, 4 * params / 4 + 4 * (1 << 20));
  // Two samples a rank, 4 units of 1000 bytes a sample.
  EXPECT_DOUBLE_EQ(m[0].activations, 2 * 4 * 1000);
}

TEST(Simulate, OneFOneBHoldsPMicroBatchesGpipeHoldsM) {
  const ModelProfile p = even_model(2, 1e-3, 1e-3, 0, 1000);
  const Cluster cl = one_host(2);
  const double gpipe =
      simulate(p, cl, pipeline(2, 8, PipelineSchedule::gpipe), 8).memory.activations;
  const double f1b1 =
      simulate(p, cl, pipeline(2, 8, PipelineSchedule::one_f_one_b), 8).memory.activations;
  // Stage 1 under GPipe: 8 micro-batches of one sample, each its unit's 1000 bytes and the
  // 100-byte input it received.
  EXPECT_DOUBLE_EQ(gpipe, 8 * (1000 + 100));
  EXPECT_DOUBLE_EQ(f1b1, 2 * 1000);  // stage 0 of 2 keeps 2 in flight, stage 1 one of 1100
  PlanConfig re = pipeline(2, 8, PipelineSchedule::gpipe);
  re.recompute = true;
  // The fuller stage is 1: GPipe's 8 micro-batches' inputs (100 bytes each, stage 0's
  // outputs), plus the one micro-batch whose backward recomputes its 1000 bytes.
  EXPECT_DOUBLE_EQ(simulate(p, cl, re, 8).memory.activations, 8 * 100 + 1000);
}

TEST(Simulate, ComputeSlowsWhenRanksShareCores) {
  const ModelProfile p = even_model(1, 1e-3, 1e-3, 0);
  Cluster shared = one_host(4);
  shared.cores_per_host = 2;  // 4 one-thread ranks on 2 cores: half speed each
  PlanConfig c;
  c.data = 4;
  EXPECT_NEAR(simulate(p, shared, c, 4).step_s, 4e-3, 1e-12);
  EXPECT_NEAR(simulate(p, one_host(4), c, 4).step_s, 2e-3, 1e-12);
}

TEST(Simulate, RanksThatIdleLeaveTheirCoresToTheOthers) {
  // Two stages on one core, one micro-batch: the stages never compute at once, so each
  // runs at full speed; with 8 micro-batches they overlap and share the core.
  const ModelProfile p = even_model(2, 1e-3, 1e-3, 0);
  Cluster one_core = one_host(2);
  one_core.cores_per_host = 1;
  EXPECT_NEAR(simulate(p, one_core, pipeline(2, 1, PipelineSchedule::gpipe), 1).step_s,
              simulate(p, one_host(2), pipeline(2, 1, PipelineSchedule::gpipe), 1).step_s, 1e-9);
  const double alone = simulate(p, one_host(2), pipeline(2, 8, PipelineSchedule::gpipe), 8).step_s;
  const double shared = simulate(p, one_core, pipeline(2, 8, PipelineSchedule::gpipe), 8).step_s;
  EXPECT_GT(shared, 1.5 * alone);
  EXPECT_LT(shared, 2.0 * alone);
}

TEST(Simulate, RefusesWhatCannotRun) {
  const ModelProfile p = even_model(2, 1e-3, 1e-3, 0);
  EXPECT_THROW(simulate(p, one_host(4), pipeline(3, 3, PipelineSchedule::gpipe), 3), Error);
  EXPECT_THROW(simulate(p, one_host(2), pipeline(2, 3, PipelineSchedule::gpipe), 4), Error);
  PlanConfig wide = pipeline(4, 4, PipelineSchedule::gpipe);
  EXPECT_THROW(simulate(p, one_host(4), wide, 4), Error);  // 4 stages of 2 units
}

TEST(Simulate, FourThousandRanksInOneRepresentativeReplica) {
  const ModelProfile p = even_model(26, 1e-3, 2e-3, 2e6);
  Cluster c = one_host(8, {5e-6, 25e9});
  c.hosts = 512;
  c.inter = {1e-5, 12.5e9};
  PlanConfig cfg;
  cfg.data = 512;
  cfg.pipeline = 8;
  cfg.micro_batches = 32;
  const Prediction r = simulate(p, c, cfg, 512 * 32);
  EXPECT_GT(r.step_s, r.compute_s);
  EXPECT_GT(r.bubble_s, 0);
}

TEST(TaskGraph, ResourceOrderAndWaitsDecideStarts) {
  TaskGraph g;
  const int a = g.add_resource("a"), b = g.add_resource("b");
  const auto t0 = g.add(a, 1.0, {}, "t0");
  const auto t1 = g.add(b, 0.5, {}, "t1");
  const auto t2 = g.add(a, 2.0, {}, "t2");  // after t0: same resource
  const auto t3 = g.add(b, 1.0, {t2}, "t3");
  g.wait(t1, t0);  // added later: t1 now starts after t0
  g.run();
  EXPECT_DOUBLE_EQ(g.start(t1), 1.0);
  EXPECT_DOUBLE_EQ(g.start(t2), 1.0);
  EXPECT_DOUBLE_EQ(g.start(t3), 3.0);
  EXPECT_DOUBLE_EQ(g.makespan(), 4.0);
  EXPECT_DOUBLE_EQ(g.busy(b), 1.5);
}

TEST(TaskGraph, ADeadlockIsAnErrorNamingTheTasks) {
  TaskGraph g;
  const int a = g.add_resource("a");
  const auto first = g.add(a, 1.0, {}, "first");
  const auto second = g.add(a, 1.0, {}, "second");
  g.wait(first, second);  // waits on what its resource runs after it
  try {
    g.run();
    FAIL() << "a deadlock ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("first"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace braid::plan
