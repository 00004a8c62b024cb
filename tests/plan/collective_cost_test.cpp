#include "plan/collective_cost.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace braid::plan {
namespace {

constexpr Algorithm kAll[] = {Algorithm::ring, Algorithm::halving_doubling,
                              Algorithm::binary_blocks, Algorithm::tree};

Link link(double latency_s, double bytes_per_s) {
  Link l;
  l.latency_s = latency_s;
  l.bytes_per_s = bytes_per_s;
  return l;
}

void expect_relative(double actual, double expected, double tolerance) {
  EXPECT_NEAR(actual, expected, std::abs(expected) * tolerance) << actual << " vs " << expected;
}

// The fastest flat time, worked out here rather than through best_collective.
double min_flat(Collective c, double bytes, int ranks, const Link& l) {
  double best = INFINITY;
  for (Algorithm a : kAll) {
    if (a == Algorithm::halving_doubling && (ranks & (ranks - 1)) != 0) continue;
    best = std::min(best, collective_seconds(c, a, bytes, ranks, l));
  }
  return best;
}

TEST(CollectiveCost, RingAllreduceIsTheClosedForm) {
  const Link l = link(5e-6, 12.5e9);
  const double bytes = 3e8;
  for (int n : {2, 3, 8, 4096}) {
    const double expected = 2.0 * (n - 1) / n * bytes / l.bytes_per_s + 2.0 * (n - 1) * l.latency_s;
    expect_relative(collective_seconds(Collective::allreduce, Algorithm::ring, bytes, n, l),
                    expected, 1e-12);
  }
}

TEST(CollectiveCost, OneRankCostsNothing) {
  const Link l = link(5e-6, 1e9);
  for (Collective c : {Collective::allreduce, Collective::reduce_scatter, Collective::allgather,
                       Collective::broadcast}) {
    for (Algorithm a : kAll) {
      EXPECT_TRUE(collective_steps(c, a, 1e6, 1).empty());
      EXPECT_EQ(collective_seconds(c, a, 1e6, 1, l), 0.0);
    }
  }
}

TEST(CollectiveCost, HalvingDoublingHasLogLatencyAndRingBandwidth) {
  const Link l = link(5e-6, 12.5e9);
  const double bytes = 3e8;
  for (int n : {2, 8, 4096}) {
    const double log2n = std::log2(n);
    const double expected = 2.0 * (n - 1) / n * bytes / l.bytes_per_s + 2 * log2n * l.latency_s;
    expect_relative(
        collective_seconds(Collective::allreduce, Algorithm::halving_doubling, bytes, n, l),
        expected, 1e-12);
    EXPECT_EQ(collective_steps(Collective::allreduce, Algorithm::halving_doubling, bytes, n).size(),
              static_cast<size_t>(2 * log2n));
  }
  EXPECT_THROW(collective_steps(Collective::allreduce, Algorithm::halving_doubling, bytes, 6),
               Error);
  EXPECT_THROW(collective_steps(Collective::reduce_scatter, Algorithm::halving_doubling, bytes, 6),
               Error);
}

TEST(CollectiveCost, BinaryBlocksFoldsTheExtraRanks) {
  const Link l = link(5e-6, 12.5e9);
  const double bytes = 3e8;
  const double hd4 =
      collective_seconds(Collective::allreduce, Algorithm::halving_doubling, bytes, 4, l);
  expect_relative(collective_seconds(Collective::allreduce, Algorithm::binary_blocks, bytes, 6, l),
                  hd4 + 2 * l.seconds(bytes), 1e-12);
  expect_relative(
      collective_seconds(Collective::allreduce, Algorithm::binary_blocks, bytes, 8, l),
      collective_seconds(Collective::allreduce, Algorithm::halving_doubling, bytes, 8, l), 1e-12);
}

TEST(CollectiveCost, ReduceScatterAndAllgatherAreHalfARingAllreduce) {
  const Link l = link(5e-6, 12.5e9);
  const double bytes = 3e8;
  for (int n : {2, 3, 8, 4096}) {
    const double ar = collective_seconds(Collective::allreduce, Algorithm::ring, bytes, n, l);
    for (Collective c : {Collective::reduce_scatter, Collective::allgather}) {
      expect_relative(collective_seconds(c, Algorithm::ring, bytes, n, l), ar / 2, 1e-12);
    }
  }
}

TEST(CollectiveCost, PipelinedTreeApproachesTwiceTheBufferAtLargeSizes) {
  const Link l = link(5e-6, 1e9);
  const double bytes = 1e9;
  const int n = 8;  // depth 3
  const double tree = collective_seconds(Collective::allreduce, Algorithm::tree, bytes, n, l);
  expect_relative(tree, 2 * bytes / l.bytes_per_s, 0.05);
  EXPECT_GT(best_chunks(Collective::allreduce, Algorithm::tree, bytes, n, l), 1);
  // Unpipelined, each of the 2 x depth steps carries the whole buffer.
  EXPECT_NEAR(steps_seconds(collective_steps(Collective::allreduce, Algorithm::tree, bytes, n), l),
              6 * l.seconds(bytes), 1e-9);
}

TEST(CollectiveCost, TreeAtTinySizesPaysTwiceItsDepthInLatency) {
  const Link l = link(5e-6, 1e12);
  for (auto [n, depth] : {std::pair{2, 1}, {5, 3}, {8, 3}, {9, 4}, {4096, 12}}) {
    expect_relative(collective_seconds(Collective::allreduce, Algorithm::tree, 1.0, n, l),
                    2 * depth * l.latency_s, 1e-6);
  }
}

TEST(CollectiveCost, BroadcastChainPipelinesItsChunks) {
  // N - 1 hops for the first chunk, one more step for each further chunk.
  const auto steps =
      collective_steps_in_chunks(Collective::broadcast, Algorithm::ring, 1024.0, 5, 4);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].bytes, 256.0);
  EXPECT_EQ(steps[0].repeats, 4 + 4 - 1);
}

Cluster cluster(Link intra, Link inter, int hosts, int per_host) {
  Cluster c;
  c.hosts = hosts;
  c.ranks_per_host = per_host;
  c.intra = intra;
  c.inter = inter;
  return c;
}

TEST(CollectiveBest, OneHostGroupUsesTheIntraLink) {
  const Cluster c = cluster(link(1e-6, 25e9), link(5e-5, 1e9), 4, 8);
  for (double bytes : {1e2, 1e8}) {
    const CollectiveCost cost = best_collective(Collective::allreduce, bytes, {8, 8, 1}, c);
    EXPECT_DOUBLE_EQ(cost.seconds, min_flat(Collective::allreduce, bytes, 8, c.intra));
    EXPECT_FALSE(cost.hierarchical);
  }
  EXPECT_EQ(best_collective(Collective::allreduce, 1e8, {1, 1, 1}, c).seconds, 0.0);
}

TEST(CollectiveBest, HierarchicalWinsOnASlowNetwork) {
  const Cluster c = cluster(link(1e-6, 25e9), link(5e-5, 1.25e9), 8, 8);
  const double bytes = 1e7;
  const CollectiveCost cost = best_collective(Collective::allreduce, bytes, {64, 8, 1}, c);
  // Flat across hosts with 8 a host is the ring (one flow out of each host).
  const double flat =
      collective_seconds(Collective::allreduce, Algorithm::ring, bytes, 64, c.inter);
  EXPECT_TRUE(cost.hierarchical);
  EXPECT_LT(cost.seconds, 0.9 * flat);
  // Inside each host a reduce-scatter and an allgather; across the 8 hosts, 8 rings on an
  // eighth of the buffer each, sharing the host's link.
  Link rings = c.inter;
  rings.bytes_per_s /= 8;
  const double expected = min_flat(Collective::reduce_scatter, bytes, 8, c.intra) +
                          min_flat(Collective::allreduce, bytes / 8, 8, rings) +
                          min_flat(Collective::allgather, bytes, 8, c.intra);
  expect_relative(cost.seconds, expected, 1e-12);
}

TEST(CollectiveBest, SharingSplitsTheNetworkBandwidth) {
  const Cluster c = cluster(link(1e-6, 25e9), link(0, 1.25e9), 16, 1);
  for (Collective coll : {Collective::allreduce, Collective::allgather, Collective::broadcast}) {
    const double alone = best_collective(coll, 1e8, {16, 1, 1}, c).seconds;
    const double shared = best_collective(coll, 1e8, {16, 1, 2}, c).seconds;
    EXPECT_DOUBLE_EQ(shared, 2 * alone) << collective_name(coll);
  }
}

// A ring allreduce message by message, from the data rather than a step count: rank i at
// step s sends chunk (i - s) mod N to rank i + 1, once the chunk arrived from rank i - 1,
// and the receiver folds it into its own copy (a set of contributions). Each link carries
// one message at a time, first come first served. It ends when every rank holds every chunk
// with all contributions.
double simulate_ring_allreduce(int n, double bytes, const Link& l) {
  const unsigned all = (1u << n) - 1;
  std::vector<std::vector<unsigned>> has(n, std::vector<unsigned>(n));
  for (int i = 0; i < n; ++i)
    for (int chunk = 0; chunk < n; ++chunk) has[i][chunk] = 1u << i;
  std::vector<double> ready(n, 0.0), link_free(n, 0.0);  // link i: rank i to rank i + 1
  double finish = 0;
  auto done = [&] {
    for (const auto& rank : has)
      for (unsigned mask : rank)
        if (mask != all) return false;
    return true;
  };
  for (int s = 0; !done(); ++s) {
    if (s > 4 * n) {
      ADD_FAILURE() << "the ring does not finish";
      break;
    }
    std::vector<unsigned> sent(n);
    std::vector<double> arrival(n);
    for (int i = 0; i < n; ++i) {
      const int chunk = ((i - s) % n + n) % n;
      sent[i] = has[i][chunk];
      const double start = std::max(ready[i], link_free[i]);
      arrival[i] = start + l.latency_s + bytes / n / l.bytes_per_s;
      link_free[i] = arrival[i];
    }
    for (int i = 0; i < n; ++i) {
      const int to = (i + 1) % n;
      has[to][((i - s) % n + n) % n] |= sent[i];
      ready[to] = arrival[i];
      finish = std::max(finish, arrival[i]);
    }
  }
  return finish;
}

TEST(CollectiveSimulation, RingAllreduceMessageByMessageMatches) {
  // Dyadic values, so both sums are exact and must agree to the bit.
  const Link l = link(0.5, 1024);
  const double bytes = 5 * 1024 * 3;
  EXPECT_EQ(simulate_ring_allreduce(5, bytes, l),
            collective_seconds(Collective::allreduce, Algorithm::ring, bytes, 5, l));
  const Link real = link(5e-6, 12.5e9);
  EXPECT_DOUBLE_EQ(simulate_ring_allreduce(5, 1e8, real),
                   collective_seconds(Collective::allreduce, Algorithm::ring, 1e8, 5, real));
}

}  // namespace
}  // namespace braid::plan
