// `braid plan` as a user runs it: a ranking with the command for the best, a profile saved
// and read back to the same choice, `strategy: auto` training what the plan chose, the
// scaling table and plot, this machine measured as a cluster file; and the errors (a bad
// cluster key, nothing that fits, a profile of another model), each naming what to do.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "fashion_mnist_data.h"
#include "run_braid.h"
#include "same_checkpoint.h"
#include "temp_dir.h"

namespace {

using braid::testing::read_bytes;
using braid::testing::run_braid;
using braid::testing::TempDir;

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\n  output: " << text << "\n  lacks:  " << part;
}

// One host of `ranks` ranks on as many cores, `gib` of memory.
std::string write_cluster(const TempDir& tmp, int hosts, int ranks, double gib,
                          const std::string& extra = "") {
  const std::string path = tmp.file("cluster.json");
  std::ofstream(path) << R"({"hosts": )" << hosts << R"(, "ranks_per_host": )" << ranks
                      << R"(, "cores_per_host": )" << ranks << R"(, "memory_per_host_gib": )" << gib
                      << extra << R"(, "links": {"intra": {"latency_us": 1, "gbit_s": 40},
                                        "inter": {"latency_us": 20, "gbit_s": 10}}})";
  return path;
}

std::string best_line(const std::string& output) {
  const size_t at = output.find("run the best:\n");
  if (at == std::string::npos) return "";
  const size_t begin = at + 14, end = output.find('\n', begin);
  return output.substr(begin, end - begin);
}

TEST(PlanCli, RanksConfigurationsAndTheSavedProfileGivesTheSameChoice) {
  const TempDir tmp;
  const std::string cluster = write_cluster(tmp, 1, 2, 8);
  const std::string args = "plan --model mlp --cluster " + cluster +
                           " --global-batch 64 --profile " + tmp.file("mlp.profile.json");
  const braid::testing::BraidResult first = run_braid(args);
  ASSERT_EQ(first.code, 0) << first.output;
  EXPECT_TRUE(contains(first.output, "measuring mlp"));
  EXPECT_TRUE(contains(first.output, "configuration"));
  EXPECT_TRUE(contains(first.output, "braid launch -n 2 -- braid train --strategy"));
  EXPECT_TRUE(contains(first.output, "--model mlp --global-batch 64"));
  const braid::testing::BraidResult again = run_braid(args);
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_FALSE(contains(again.output, "measuring mlp"));  // read, not measured
  EXPECT_EQ(best_line(again.output), best_line(first.output));
  EXPECT_FALSE(best_line(first.output).empty());
}

TEST(PlanCli, StrategyAutoTrainsWhatThePlanChose) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string cluster = write_cluster(tmp, 1, 2, 8);
  const std::string profile = tmp.file("mlp.profile.json");
  const braid::testing::BraidResult plan = run_braid("plan --model mlp --cluster " + cluster +
                                                     " --global-batch 64 --profile " + profile);
  ASSERT_EQ(plan.code, 0) << plan.output;
  const braid::testing::BraidResult r = run_braid(
      "launch -n 2 -- " + std::string(BRAID_BINARY) +
      " train --model mlp --batch 32 --steps 3 --threads 1 --eval-batches 1 --log-every 100 "
      "--plan.cluster-file " +
      cluster + " --plan.profile-file " + profile + " --out " + tmp.file("run"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "strategy auto: braid plan chose"));
  EXPECT_TRUE(contains(r.output, "[rank 0] done: 3 steps"));
  // The run's saved config holds the choice, not "auto": a resume runs the same strategy.
  const std::string config = read_bytes(tmp.file("run/config.json"));
  EXPECT_FALSE(contains(config, "\"strategy\": \"auto\""));
  // What it chose is the plan's first: the command braid plan printed names its strategy.
  const std::string best = best_line(plan.output);
  const size_t at = best.find("--strategy ");
  ASSERT_NE(at, std::string::npos) << best;
  const std::string strategy = best.substr(at + 11, best.find(' ', at + 11) - at - 11);
  EXPECT_TRUE(contains(config, "\"strategy\": \"" + strategy + "\"")) << best;
}

TEST(PlanCli, AutoWithoutAProfileOrWithAnotherModelsIsRefused) {
  const TempDir tmp;
  const std::string cluster = write_cluster(tmp, 1, 1, 8);
  braid::testing::BraidResult r =
      run_braid("train --model mlp --steps 1 --plan.cluster-file " + cluster);
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(contains(r.output, "plan.cluster_file needs plan.profile_file"));
  ASSERT_EQ(run_braid("plan --model cnn --cluster " + cluster + " --global-batch 8 --profile " +
                      tmp.file("cnn.json"))
                .code,
            0);
  r = run_braid("train --model mlp --steps 1 --plan.cluster-file " + cluster +
                " --plan.profile-file " + tmp.file("cnn.json"));
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(contains(r.output, "is of model \"cnn\", but this run trains \"mlp\""));
}

TEST(PlanCli, NothingThatFitsIsAnErrorNamingTheMemory) {
  const TempDir tmp;
  const std::string cluster = write_cluster(tmp, 1, 2, 0.0001);
  const braid::testing::BraidResult r =
      run_braid("plan --model mlp --cluster " + cluster + " --global-batch 64");
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(contains(r.output, "no configuration of mlp fits"));
  EXPECT_TRUE(contains(r.output, "more ranks, or hosts with more memory"));
}

TEST(PlanCli, ABadClusterKeyIsNamed) {
  const TempDir tmp;
  const std::string cluster = write_cluster(tmp, 1, 2, 8, R"(, "host": 3)");
  const braid::testing::BraidResult r =
      run_braid("plan --model mlp --cluster " + cluster + " --global-batch 64");
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(contains(r.output, "unknown key 'host'; did you mean 'hosts'?"));
  const braid::testing::BraidResult missing =
      run_braid("plan --model mlp --cluster " + tmp.file("none.json"));
  EXPECT_NE(missing.code, 0);
  EXPECT_TRUE(contains(missing.output, "braid plan measure-cluster --out"));
}

TEST(PlanCli, ScalingPrintsEachFamilyAndDrawsThePlot) {
  const TempDir tmp;
  const std::string cluster = write_cluster(tmp, 16, 4, 16);
  const braid::testing::BraidResult r =
      run_braid("plan scaling --model mlp --cluster " + cluster + " --batch-per-rank 16 " +
                "--max-ranks 64 --svg " + tmp.file("scaling.svg"));
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* part : {"family", "efficiency", "ddp", "zero1", "ps", "    64 "})
    EXPECT_TRUE(contains(r.output, part)) << part;
  const std::string svg = read_bytes(tmp.file("scaling.svg"));
  EXPECT_TRUE(contains(svg, "<svg"));
  EXPECT_TRUE(contains(svg, ">ddp<"));
}

TEST(PlanCli, MeasureClusterWritesAFileThePlanReads) {
  const TempDir tmp;
  const braid::testing::BraidResult m =
      run_braid("plan measure-cluster --out " + tmp.file("here.json") + " --ranks-per-host 2");
  ASSERT_EQ(m.code, 0) << m.output;
  EXPECT_TRUE(contains(m.output, "\"intra\""));
  const braid::testing::BraidResult r =
      run_braid("plan --model mlp --cluster " + tmp.file("here.json") + " --global-batch 32");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "run the best:"));
}

}  // namespace
