// BRAID_EVENTS_DIR: every rank of a job writes its own event stream (what braid worker
// follows and sends to the job server): the run's edges and its records, each with its rank.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fashion_mnist_data.h"
#include "run_braid.h"
#include "temp_dir.h"

namespace {

using braid::testing::run_braid;
using braid::testing::TempDir;
using nlohmann::json;

std::vector<json> records(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

TEST(EventStream, EveryRankWritesItsRunFromStartedToStopped) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const auto r = run_braid("launch -n 2 -- " + std::string(BRAID_BINARY) +
                               " train --model mlp --steps 20 --log-every 10 --eval-every 10 "
                               "--threads 1 --out " +
                               tmp.file("run"),
                           "BRAID_EVENTS_DIR=" + tmp.file("events"));
  ASSERT_EQ(r.code, 0) << r.output;
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const std::vector<json> events =
        records(tmp.file("events/rank-" + std::to_string(rank) + ".jsonl"));
    ASSERT_GE(events.size(), 4u);
    EXPECT_EQ(events.front().value("event", ""), "started");
    EXPECT_EQ(events.front().value("world", 0), 2);
    EXPECT_EQ(events.back().value("event", ""), "stopped");
    EXPECT_EQ(events.back().value("how", ""), "done");
    EXPECT_EQ(events.back().value("step", 0), 20);
    int trains = 0, evals = 0;
    for (const json& e : events) {
      EXPECT_EQ(e.value("rank", -1), rank) << e.dump();
      EXPECT_TRUE(e.contains("time")) << e.dump();
      trains += e.value("event", "") == "train";
      evals += e.value("event", "") == "eval";
    }
    EXPECT_EQ(trains, 2) << "steps 10 and 20";
    EXPECT_GE(evals, 2);
  }
}

}  // namespace
