// The planner: never proposes what does not fit the stated memory, ranks by predicted
// samples/s, writes a command braid accepts; the cluster file's rules.
#include "plan/planner.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "plan/cluster.h"
#include "plan/scaling.h"

namespace braid::plan {
namespace {

ModelProfile blocks(int units, double params_each) {
  ModelProfile p;
  p.model = "blocks";
  p.threads = 1;
  p.optimizer_s_per_param = 1e-9;
  for (int i = 0; i < units; ++i) {
    UnitProfile u;
    u.name = "h." + std::to_string(i);
    u.kind = "GptBlock";
    u.forward = {1e-4, 1e-3};
    u.backward = {2e-4, 2e-3};
    u.params = params_each;
    u.activation_bytes_per_sample = 4e6;
    u.output_bytes_per_sample = 2e5;
    p.units.push_back(u);
  }
  return p;
}

Cluster hosts(int n, int per_host, double gib_per_host) {
  Cluster c;
  c.hosts = n;
  c.ranks_per_host = per_host;
  c.cores_per_host = per_host;
  c.memory_per_host = gib_per_host * 1024 * 1024 * 1024;
  c.intra = {2e-6, 20e9};
  c.inter = {2e-5, 1.25e9};
  return c;
}

TEST(Planner, NeverProposesAConfigurationOverTheMemory) {
  // 8 units of 25M parameters: 200M, 3.2 GB under DDP's 16 bytes a parameter, over the
  // 2 GiB a rank of this cluster has; sharding or cutting the model must bring it under.
  const ModelProfile p = blocks(8, 25e6);
  const Cluster c = hosts(2, 4, 8);
  PlanOptions o;
  o.batch = 32;
  const std::vector<Candidate> ranked = plan_all(p, c, o);
  ASSERT_FALSE(ranked.empty());
  int fitting = 0, over = 0;
  bool seen_over = false;
  for (const Candidate& k : ranked) {
    const double need = k.prediction.memory.total();
    EXPECT_EQ(k.prediction.fits, need <= c.memory_per_rank()) << describe(k.config);
    if (k.prediction.fits) {
      ++fitting;
      EXPECT_FALSE(seen_over) << "a fitting configuration ranked after one that does not";
    } else {
      ++over;
      seen_over = true;
    }
  }
  EXPECT_GT(fitting, 0);
  EXPECT_GT(over, 0);
  // DDP holds every parameter, gradient and Adam state: 16 bytes x 200M > 2 GiB.
  for (const Candidate& k : ranked) {
    if (k.config.method == Method::data_parallel && k.config.data == 8 &&
        k.config.zero_stage == 0) {
      EXPECT_FALSE(k.prediction.fits);
    }
  }
  const Candidate* top = best(ranked);
  ASSERT_NE(top, nullptr);
  EXPECT_LE(top->prediction.memory.total(), c.memory_per_rank());
}

TEST(Planner, TheBestIsTheFastestThatFitsAndTrainsTheSameModel) {
  // A slow network (1 Gbit/s between 4 hosts): configurations differ by far more than the
  // half-percent tie, so the ranking has to be right.
  const ModelProfile p = blocks(4, 1e6);
  const Cluster c = hosts(4, 1, 64);
  PlanOptions o;
  o.batch = 64;
  const std::vector<Candidate> ranked = plan_all(p, c, o);
  const Candidate* top = best(ranked);
  ASSERT_NE(top, nullptr);
  for (const Candidate& k : ranked) {
    if (k.prediction.fits && k.same_training) {
      // Within half a percent the simpler goes first (planner.h).
      EXPECT_GE(top->prediction.samples_per_s * 1.005, k.prediction.samples_per_s)
          << describe(k.config);
    }
  }
  EXPECT_TRUE(top->same_training);
  bool local_sgd = false;
  for (const Candidate& k : ranked) local_sgd |= k.config.method == Method::local_sgd;
  EXPECT_TRUE(local_sgd);
}

TEST(Planner, LossyCodecsAreListedButNeverTheFirstChoice) {
  // A slow network where int8 on the wire would be fastest by far (one unit: no pipeline
  // to send activations instead of gradients).
  ModelProfile p = blocks(1, 2e7);
  p.codecs = {{"int8", 0.25, 1e-10}};
  Cluster c = hosts(4, 1, 64);
  c.inter = {2e-5, 0.0125e9};  // 100 Mbit/s
  PlanOptions o;
  o.batch = 16;
  const std::vector<Candidate> ranked = plan_all(p, c, o);
  const Candidate* fastest_codec = nullptr;
  for (const Candidate& k : ranked) {
    if (k.config.codec != "int8") continue;
    EXPECT_FALSE(k.same_training);
    if (!fastest_codec) fastest_codec = &k;
  }
  ASSERT_NE(fastest_codec, nullptr);
  const Candidate* top = best(ranked);
  ASSERT_NE(top, nullptr);
  EXPECT_TRUE(top->config.codec.empty());
  EXPECT_GT(fastest_codec->prediction.samples_per_s, top->prediction.samples_per_s);
  EXPECT_NE(train_command(fastest_codec->config, "m", 4, 16).find("--compression.codec int8"),
            std::string::npos);
}

TEST(Planner, RefusesAnEmptyBatch) {
  EXPECT_THROW(plan_all(blocks(2, 1e6), hosts(1, 2, 8), PlanOptions{}), Error);
}

TEST(Planner, TrainCommandSpellsTheConfiguration) {
  PlanConfig c;
  c.data = 2;
  c.pipeline = 2;
  c.micro_batches = 8;
  c.schedule = parallel::PipelineSchedule::interleaved;
  c.chunks = 2;
  c.zero_stage = 1;
  const std::string cmd = train_command(c, "gpt-small", 4, 32);
  EXPECT_NE(cmd.find("braid launch -n 4 -- braid train --strategy mesh --mesh.data 2 "
                     "--mesh.tensor 1 --mesh.pipeline 2 --zero-stage 1"),
            std::string::npos)
      << cmd;
  EXPECT_NE(cmd.find("--pipeline.micro-batches 8 --pipeline.schedule interleaved "
                     "--pipeline.chunks 2"),
            std::string::npos)
      << cmd;
  EXPECT_NE(cmd.find("--model gpt-small --global-batch 32"), std::string::npos) << cmd;
}

TEST(Scaling, EfficiencyIsTheIdealOverThePredictedStep) {
  const ModelProfile p = blocks(8, 1e6);
  const Cluster c = hosts(64, 8, 64);
  const ScalingReport r = scaling_report(p, c, 4, 512);
  ASSERT_FALSE(r.families.empty());
  EXPECT_EQ(r.ranks.back(), 512);
  const ScalingFamily* ddp = nullptr;
  for (const ScalingFamily& f : r.families)
    if (f.name == "ddp") ddp = &f;
  ASSERT_NE(ddp, nullptr);
  ASSERT_FALSE(ddp->points.empty());
  for (const ScalingPoint& pt : ddp->points) {
    EXPECT_NEAR(pt.efficiency, r.ideal_step_s / pt.step_s, 1e-12);
    EXPECT_LE(pt.efficiency, 1 + 1e-9) << pt.ranks;  // the ideal is a lower bound
  }
  // Communication grows with the ranks: the largest run is less efficient than 2 ranks.
  EXPECT_LT(ddp->points.back().efficiency, ddp->points[1].efficiency);
}

TEST(ClusterFile, ParsesAndNamesBadKeys) {
  const nlohmann::json j = nlohmann::json::parse(R"({"hosts": 4, "ranks_per_host": 8,
      "cores_per_host": 8, "memory_per_host_gib": 64,
      "links": {"intra": {"latency_us": 1, "gbit_s": 200}, "inter": {"latency_us": 5, "gbit_s": 100}}})");
  const Cluster c = parse_cluster(j, "c.json");
  EXPECT_EQ(c.ranks(), 32);
  EXPECT_DOUBLE_EQ(c.inter.bytes_per_s, 100e9 / 8);
  EXPECT_DOUBLE_EQ(c.intra.latency_s, 1e-6);
  EXPECT_DOUBLE_EQ(c.memory_per_rank(), 8.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(c.speed(1), 1.0);
  EXPECT_DOUBLE_EQ(c.speed(2), 0.5);
  EXPECT_EQ(parse_cluster(cluster_json(c), "again").ranks(), 32);
  nlohmann::json bad = j;
  bad["host"] = 2;
  try {
    parse_cluster(bad, "c.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown key 'host'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("did you mean 'hosts'"), std::string::npos) << e.what();
  }
  nlohmann::json jittery = j;
  jittery["jitter"] = 0.1;
  EXPECT_DOUBLE_EQ(parse_cluster(jittery, "c.json").jitter, 0.1);
  EXPECT_DOUBLE_EQ(parse_cluster(cluster_json(parse_cluster(jittery, "c")), "c").jitter, 0.1);
  jittery["jitter"] = 1.5;
  EXPECT_THROW(parse_cluster(jittery, "c.json"), Error);
  bad = j;
  bad["links"]["inter"]["gbit_s"] = 0;
  EXPECT_THROW(parse_cluster(bad, "c.json"), Error);
  bad = j;
  bad["links"].erase("inter");
  EXPECT_THROW(parse_cluster(bad, "c.json"), Error);  // 4 hosts need a network
}

TEST(ClusterFile, FewerRanksThanAHostGetItsCores) {
  Cluster c = hosts(4, 8, 64);
  const Cluster two = c.with_ranks(2);
  EXPECT_EQ(two.ranks(), 2);
  EXPECT_DOUBLE_EQ(two.speed(1), 1.0);  // a rank keeps its 1 core of 8
  EXPECT_DOUBLE_EQ(two.memory_per_rank(), c.memory_per_rank());
  EXPECT_EQ(c.with_ranks(16).hosts, 2);
  EXPECT_THROW(c.with_ranks(12), Error);
}

}  // namespace
}  // namespace braid::plan
