#include "plan/cluster.h"

#include <algorithm>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "train/suggest.h"

namespace braid::plan {
namespace {

using nlohmann::json;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

void check_keys(const json& j, const std::vector<std::string>& accepted, const std::string& where) {
  BRAID_CHECK(j.is_object(), where, ": expected an object, got ", j.type_name());
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (std::find(accepted.begin(), accepted.end(), it.key()) != accepted.end()) continue;
    std::string names;
    for (const auto& a : accepted) names += (names.empty() ? "" : ", ") + a;
    const std::string near = train::closest_match(it.key(), accepted);
    BRAID_THROW(Error, where, ": unknown key '", it.key(), "'; ",
                near.empty() ? "" : "did you mean '" + near + "'? ", "accepted: ", names);
  }
}

double positive(const json& j, const char* key, const std::string& where) {
  BRAID_CHECK(j.contains(key), where, ": '", key, "' is missing");
  BRAID_CHECK(j[key].is_number(), where, ".", key, ": expected a number, got ", j[key].type_name());
  const double v = j[key].get<double>();
  BRAID_CHECK(v > 0, where, ".", key, " is ", v, "; it must be above 0");
  return v;
}

int count(const json& j, const char* key, const std::string& where) {
  BRAID_CHECK(j.contains(key), where, ": '", key, "' is missing");
  BRAID_CHECK(j[key].is_number_integer() && j[key].get<int64_t>() >= 1 &&
                  j[key].get<int64_t>() <= (1 << 20),
              where, ".", key, " must be a whole number in [1, 1048576], got ", j[key].dump());
  return j[key].get<int>();
}

Link parse_link(const json& j, const std::string& where) {
  check_keys(j, {"latency_us", "gbit_s"}, where);
  BRAID_CHECK(
      j.contains("latency_us") && j["latency_us"].is_number() && j["latency_us"].get<double>() >= 0,
      where, ".latency_us: a number of microseconds >= 0 is needed");
  Link l;
  l.latency_s = j["latency_us"].get<double>() * 1e-6;
  l.bytes_per_s = positive(j, "gbit_s", where) * 1e9 / 8;
  return l;
}

json link_json(const Link& l) {
  return {{"latency_us", l.latency_s * 1e6}, {"gbit_s", l.bytes_per_s * 8 / 1e9}};
}

}  // namespace

double Cluster::speed(int profile_threads) const {
  if (compute_speed > 0) return compute_speed;
  const double cores_per_rank = cores_per_rank_kept > 0
                                    ? cores_per_rank_kept
                                    : static_cast<double>(cores_per_host) / ranks_per_host;
  return cores_per_rank / std::max(1, profile_threads);
}

Cluster Cluster::with_ranks(int ranks) const {
  BRAID_CHECK(ranks >= 1, "cluster: ", ranks, " ranks; at least 1 is needed");
  Cluster c = *this;
  if (ranks <= ranks_per_host) {
    c.hosts = 1;
    c.cores_per_rank_kept = static_cast<double>(cores_per_host) / ranks_per_host;
    c.memory_per_host = memory_per_host / ranks_per_host * ranks;
    c.ranks_per_host = ranks;
    return c;
  }
  BRAID_CHECK(ranks % ranks_per_host == 0, "cluster: ", ranks, " ranks are not whole hosts of ",
              ranks_per_host);
  c.hosts = ranks / ranks_per_host;
  return c;
}

Cluster parse_cluster(const json& j, const std::string& where) {
  check_keys(j,
             {"hosts", "ranks_per_host", "cores_per_host", "memory_per_host_gib", "compute_speed",
              "jitter", "links"},
             where);
  Cluster c;
  c.hosts = count(j, "hosts", where);
  c.ranks_per_host = count(j, "ranks_per_host", where);
  c.cores_per_host = count(j, "cores_per_host", where);
  c.memory_per_host = positive(j, "memory_per_host_gib", where) * kGiB;
  if (j.contains("compute_speed")) c.compute_speed = positive(j, "compute_speed", where);
  if (j.contains("jitter")) {
    BRAID_CHECK(
        j["jitter"].is_number() && j["jitter"].get<double>() >= 0 && j["jitter"].get<double>() < 1,
        where, ".jitter must be a number in [0, 1), the coefficient of variation of a ",
        "rank's step time");
    c.jitter = j["jitter"].get<double>();
  }
  BRAID_CHECK(j.contains("links"), where, ": 'links' is missing (intra and inter)");
  check_keys(j["links"], {"intra", "inter"}, where + ".links");
  BRAID_CHECK(j["links"].contains("intra"), where, ".links: 'intra' is missing");
  c.intra = parse_link(j["links"]["intra"], where + ".links.intra");
  if (j["links"].contains("inter")) {
    c.inter = parse_link(j["links"]["inter"], where + ".links.inter");
  } else {
    BRAID_CHECK(c.hosts == 1, where, ".links: 'inter' is missing and there are ", c.hosts,
                " hosts");
    c.inter = c.intra;
  }
  return c;
}

Cluster load_cluster(const std::string& path) {
  std::ifstream in(path);
  BRAID_CHECK(in.good(), "cluster file '", path, "' cannot be read; write one (docs/PLAN.md) ",
              "or measure this machine's with `braid plan measure-cluster --out ", path, "`");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    BRAID_THROW(Error, "cluster file '", path, "' is not JSON: ", e.what());
  }
  return parse_cluster(j, "cluster file '" + path + "'");
}

json cluster_json(const Cluster& c) {
  json j = {{"hosts", c.hosts},
            {"ranks_per_host", c.ranks_per_host},
            {"cores_per_host", c.cores_per_host},
            {"memory_per_host_gib", c.memory_per_host / kGiB},
            {"links", {{"intra", link_json(c.intra)}, {"inter", link_json(c.inter)}}}};
  if (c.compute_speed > 0) j["compute_speed"] = c.compute_speed;
  if (c.jitter > 0) j["jitter"] = c.jitter;
  return j;
}

}  // namespace braid::plan
