// A cluster as `braid plan` sees it: hosts alike, each running ranks_per_host ranks on its
// cores and memory, and two links, inside a host (shared memory) and between hosts (the
// network), each an alpha-beta model: a message of b bytes takes latency + b / bandwidth.
// Given in a JSON file, or measured here (plan/link_measure.h):
//
//   {"hosts": 512, "ranks_per_host": 8, "cores_per_host": 8, "memory_per_host_gib": 64,
//    "links": {"intra": {"latency_us": 1, "gbit_s": 200},
//              "inter": {"latency_us": 5, "gbit_s": 100}}}
//
// "compute_speed" (optional) is a rank's speed against the profile's measurement (2: half
// the time). Without it a rank gets cores_per_host / ranks_per_host cores and its time
// scales linearly from the profile's thread count (so 4 ranks on 2 cores run at half the
// speed of one thread each, as they do here).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace braid::plan {

struct Link {
  double latency_s = 0;    // alpha: one message's fixed cost
  double bytes_per_s = 0;  // 1 / beta: one direction, one pair of ranks
  double seconds(double bytes) const { return latency_s + bytes / bytes_per_s; }
};

struct Cluster {
  int hosts = 1;
  int ranks_per_host = 1;
  int cores_per_host = 1;
  double memory_per_host = 0;  // bytes
  double compute_speed = 0;    // 0: from cores per rank (above)
  // How a rank's compute varies from step to step: the coefficient of variation of its
  // step time ("jitter"; 0: every step alike). Parameter servers' rules depend on it.
  double jitter = 0;
  Link intra, inter;
  // Set by with_ranks below one host: a rank keeps the cores it had on a full host.
  double cores_per_rank_kept = 0;

  int ranks() const { return hosts * ranks_per_host; }
  // A rank's compute speed against a profile measured with `profile_threads` threads.
  double speed(int profile_threads) const;
  // Memory each rank may use: the host's split evenly.
  double memory_per_rank() const { return memory_per_host / ranks_per_host; }
  // The same cluster with `ranks` ranks: whole hosts of ranks_per_host, or part of one
  // host, each rank with the cores and memory it has on a full host (so a scaling curve
  // compares like ranks).
  Cluster with_ranks(int ranks) const;
};

// Parses a cluster object; unknown keys and out-of-range values are errors naming `where`
// and the key.
Cluster parse_cluster(const nlohmann::json& j, const std::string& where);
Cluster load_cluster(const std::string& path);
nlohmann::json cluster_json(const Cluster& c);

}  // namespace braid::plan
