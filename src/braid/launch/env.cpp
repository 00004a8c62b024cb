// Reads the launch conventions in precedence order; the first whose rank or size variable
// is set decides rank and world size, and must then be complete and consistent.
#include "launch/env.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <vector>

#include "comm/deadline.h"
#include "core/error.h"
#include "launch/env_vars.h"
#include "launch/job_id.h"

namespace braid::launch {
namespace {

// One launcher's variables. Where several names are listed, the first set one is used
// (Slurm's step variables are more specific than the job's).
struct Convention {
  const char* name;
  std::vector<const char*> rank, size, local_rank, local_size;
};

const std::vector<Convention>& conventions() {
  static const std::vector<Convention> all = {
      {"braid",
       {"BRAID_RANK"},
       {"BRAID_WORLD_SIZE"},
       {"BRAID_LOCAL_RANK"},
       {"BRAID_LOCAL_WORLD_SIZE"}},
      {"torchrun", {"RANK"}, {"WORLD_SIZE"}, {"LOCAL_RANK"}, {"LOCAL_WORLD_SIZE"}},
      {"openmpi",
       {"OMPI_COMM_WORLD_RANK"},
       {"OMPI_COMM_WORLD_SIZE"},
       {"OMPI_COMM_WORLD_LOCAL_RANK"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE"}},
      // MPICH's and Intel MPI's Hydra set the local pair as MPI_LOCALRANKID/MPI_LOCALNRANKS.
      {"pmi",
       {"PMI_RANK"},
       {"PMI_SIZE"},
       {"MPI_LOCALRANKID", "PMI_LOCAL_RANK"},
       {"MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"}},
      // Slurm's local size is worked out from its tasks-per-node list (see slurm_local_size).
      {"slurm",
       {"SLURM_PROCID"},
       {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"},
       {"SLURM_LOCALID"},
       {}},
  };
  return all;
}

uint16_t parse_port(const std::string& variable, const std::string& text) {
  const std::optional<int64_t> v = parse_decimal(text);
  if (!v || *v < 1 || *v > 65535)
    BRAID_THROW(Error, variable, ": port '", text,
                "' is not valid: expected an integer in [1, 65535]");
  return static_cast<uint16_t>(*v);
}

// Slurm's tasks-per-node lists read "2(x3),1": 2 tasks on each of 3 nodes, then 1. The
// entry of this node (SLURM_NODEID) is its local size.
std::optional<int> slurm_local_size(const GetEnv& getenv) {
  const std::optional<EnvVar> node = first_set(getenv, {"SLURM_STEP_NODEID", "SLURM_NODEID"});
  if (const std::optional<EnvVar> list =
          first_set(getenv, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
      list && node) {
    const int node_id = int_var(*node, 0, "this node's index in the job");
    auto malformed = [&]() {
      BRAID_THROW(Error, list->name, "='", list->value,
                  "' is not valid: expected a list like '2(x3),1' (tasks per node)");
    };
    int64_t seen = 0;
    size_t pos = 0;
    const std::string& s = list->value;
    while (pos < s.size()) {
      const size_t comma = s.find(',', pos);
      const std::string item =
          s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      pos = comma == std::string::npos ? s.size() : comma + 1;
      std::string count = item, repeat = "1";
      if (const size_t paren = item.find("(x"); paren != std::string::npos) {
        if (item.back() != ')') malformed();
        count = item.substr(0, paren);
        repeat = item.substr(paren + 2, item.size() - paren - 3);
      }
      const std::optional<int64_t> c = parse_decimal(count), r = parse_decimal(repeat);
      if (!c || !r || *c < 1 || *r < 1) malformed();
      seen += *r;
      if (node_id < seen) return static_cast<int>(*c);
    }
    BRAID_THROW(Error, node->name, "=", node_id, " but ", list->name, "='", s, "' lists only ",
                seen, " nodes");
  }
  if (const std::optional<EnvVar> per_node = first_set(getenv, {"SLURM_NTASKS_PER_NODE"}))
    return int_var(*per_node, 1, "the number of tasks on each node");
  return std::nullopt;
}

void read_store_address(const GetEnv& getenv, RankEnv& env) {
  const std::optional<EnvVar> addr = first_set(getenv, {"BRAID_STORE_ADDR"});
  const std::optional<EnvVar> master_addr = first_set(getenv, {"MASTER_ADDR"});
  const std::optional<EnvVar> master_port = first_set(getenv, {"MASTER_PORT"});
  if (addr) {
    parse_store_address(addr->name, addr->value, env.store_host, env.store_port);
  } else if (env.source != "braid" && env.source != "none" && (master_addr || master_port)) {
    if (!master_addr || !master_port)
      BRAID_THROW(Error, master_addr ? "MASTER_ADDR" : "MASTER_PORT", " is set but ",
                  master_addr ? "MASTER_PORT" : "MASTER_ADDR",
                  " is not: the store's address needs both (or set BRAID_STORE_ADDR=host:port)");
    env.store_host = master_addr->value;
    env.store_port = parse_port("MASTER_PORT", master_port->value);
  } else if (env.world_size > 1) {
    BRAID_THROW(Error, "a job of ", env.world_size, " ranks (", env.source,
                "'s variables) needs the address of its store: set BRAID_STORE_ADDR=host:port",
                env.source == "braid" ? "" : ", or MASTER_ADDR and MASTER_PORT",
                " (rank 0 hosts the store there), or start the job with `braid launch`");
  }
}

}  // namespace

void parse_store_address(const std::string& variable, const std::string& value, std::string& host,
                         uint16_t& port) {
  auto bad = [&]() {
    BRAID_THROW(Error, variable, "='", value,
                "' is not valid: expected host:port with a port in [1, 65535], e.g. 10.0.0.1:29400 "
                "or [::1]:29400");
  };
  std::string h, p;
  if (!value.empty() && value[0] == '[') {
    const size_t close = value.find(']');
    if (close == std::string::npos || close + 1 >= value.size() || value[close + 1] != ':') bad();
    h = value.substr(1, close - 1);
    p = value.substr(close + 2);
  } else {
    const size_t colon = value.rfind(':');
    if (colon == std::string::npos || value.find(':') != colon) bad();
    h = value.substr(0, colon);
    p = value.substr(colon + 1);
  }
  const std::optional<int64_t> number = parse_decimal(p);
  if (h.empty() || !number || *number < 1 || *number > 65535) bad();
  host = h;
  port = static_cast<uint16_t>(*number);
}

RankEnv read_rank_env(const GetEnv& getenv) {
  RankEnv env;
  for (const Convention& c : conventions()) {
    const std::optional<EnvVar> rank = first_set(getenv, c.rank);
    const std::optional<EnvVar> size = first_set(getenv, c.size);
    if (!rank && !size) continue;
    if (!rank || !size) {
      const EnvVar& have = rank ? *rank : *size;
      BRAID_THROW(Error, have.name, " is set but ", rank ? c.size.front() : c.rank.front(),
                  " is not: ", c.name, "'s convention needs both the rank and the world size");
    }
    env.source = c.name;
    env.world_size = int_var(*size, 1, "the number of ranks in the job");
    env.rank = int_var(*rank, 0, "this process's rank");
    if (env.rank >= env.world_size)
      BRAID_THROW(Error, rank->name, "=", env.rank, " but ", size->name, "=", env.world_size,
                  ": a rank must be in [0, ", env.world_size, ")");
    // A launcher that does not say how ranks share hosts is taken to run them on one.
    const std::optional<EnvVar> local_rank = first_set(getenv, c.local_rank);
    const std::optional<EnvVar> local_size = first_set(getenv, c.local_size);
    env.local_rank =
        local_rank ? int_var(*local_rank, 0, "this process's rank on its host") : env.rank;
    if (local_size)
      env.local_size = int_var(*local_size, 1, "the number of ranks on this host");
    else if (std::optional<int> slurm =
                 c.name == std::string("slurm") ? slurm_local_size(getenv) : std::nullopt)
      env.local_size = *slurm;
    else
      env.local_size = env.world_size;
    const char* local_size_name = local_size ? local_size->name : "the local world size";
    if (env.local_size > env.world_size)
      BRAID_THROW(Error, local_size_name, "=", env.local_size, " exceeds ", size->name, "=",
                  env.world_size, ": a host cannot run more ranks than the job has");
    if (env.local_rank >= env.local_size)
      BRAID_THROW(Error, local_rank ? local_rank->name : rank->name, "=", env.local_rank, " but ",
                  local_size_name, "=", env.local_size, ": a local rank must be in [0, ",
                  env.local_size, ")");
    break;
  }
  read_store_address(getenv, env);
  if (const std::optional<EnvVar> hosted = first_set(getenv, {"BRAID_STORE_HOSTED"})) {
    if (hosted->value != "0" && hosted->value != "1")
      BRAID_THROW(Error, "BRAID_STORE_HOSTED='", hosted->value,
                  "' is not valid: expected 1 (the launcher hosts the store) or 0 (rank 0 does)");
    env.store_hosted = hosted->value == "1";
  }
  if (const std::optional<JobId> id = read_job_id(getenv)) {
    env.job_id = id->id;
    env.job_id_source = id->source;
  }
  return env;
}

int torchrun_restart_count(const GetEnv& getenv) {
  const char* v = getenv("TORCHELASTIC_RESTART_COUNT");
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  BRAID_CHECK(*end == '\0' && n >= 0 && n < (1L << 30), "TORCHELASTIC_RESTART_COUNT='", v,
              "': expected a count >= 0 (torchrun sets it)");
  return static_cast<int>(n);
}

std::chrono::milliseconds read_timeout(const GetEnv& getenv) {
  const std::optional<EnvVar> var = first_set(getenv, {"BRAID_TIMEOUT_S"});
  if (!var) return comm::kDefaultTimeout;
  char* end = nullptr;
  const double seconds = std::strtod(var->value.c_str(), &end);
  // Up to ~11 days: long enough for any wait, short enough to never overflow a clock.
  if (end == var->value.c_str() || *end != '\0' || !std::isfinite(seconds) || seconds <= 0 ||
      seconds > 1e6)
    BRAID_THROW(Error, "BRAID_TIMEOUT_S='", var->value,
                "' is not valid: expected seconds, a number in (0, 1000000], e.g. 300 or 2.5");
  return std::chrono::milliseconds(std::max<int64_t>(1, std::llround(seconds * 1000)));
}

}  // namespace braid::launch
