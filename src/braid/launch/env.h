// Where this process stands in its job, read from the environment a launcher left: braid's
// own variables (set by `braid launch`), then torchrun's, Open MPI's, PMI's (MPICH, Intel
// MPI) and Slurm's, in that order of precedence. No variables at all means a job of one
// process. Pure: reads variables through `getenv`, so tests pass their own.
//
// Malformed or inconsistent values are braid::Error naming the variable, its value and
// what is accepted. A job of more than one rank must say where its store is: braid's
// BRAID_STORE_ADDR=host:port, or (for the other launchers) BRAID_STORE_ADDR or
// MASTER_ADDR and MASTER_PORT; rank 0 hosts the store there unless BRAID_STORE_HOSTED=1.
// The job's id, which keeps jobs sharing one store apart, is read by launch/job_id.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>

namespace braid::launch {

using GetEnv = std::function<const char*(const char*)>;

struct RankEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;      // index among the ranks on this host
  int local_size = 1;      // ranks on this host
  std::string store_host;  // empty when world_size == 1 and no address was given
  uint16_t store_port = 0;
  // The convention read: "braid", "torchrun", "openmpi", "pmi", "slurm", or "none"
  // (no variables: a single-process job).
  std::string source = "none";
  // BRAID_STORE_HOSTED=1: the launcher hosts the store, so rank 0 connects to it like the
  // others instead of hosting it.
  bool store_hosted = false;
  // The job's id (launch/job_id.h), escaped for use in store keys; empty when nothing
  // named the job. job_id_source names the variable(s) it came from.
  std::string job_id;
  std::string job_id_source;
};

RankEnv read_rank_env(const GetEnv& getenv = ::getenv);

// TORCHELASTIC_RESTART_COUNT: how many times torchrun's elastic agent restarted the job's
// workers before this process (0 when unset: a first start, or another launcher).
int torchrun_restart_count(const GetEnv& getenv = ::getenv);

// BRAID_TIMEOUT_S (seconds, may be fractional, > 0): the deadline of every comm wait.
// Unset: comm::kDefaultTimeout.
std::chrono::milliseconds read_timeout(const GetEnv& getenv = ::getenv);

// Parses "host:port" or "[v6]:port" (port 1..65535); Error naming `variable` otherwise.
void parse_store_address(const std::string& variable, const std::string& value, std::string& host,
                         uint16_t& port);

}  // namespace braid::launch
