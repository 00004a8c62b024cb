// Where this process stands in a parameter-server job: its role (worker, parameter server,
// evaluator), its index within the role, and the job's shape, read from braid's own variables
// (set by `braid launch --servers S --workers W`), then TensorFlow's TF_CONFIG, then ps-lite's
// DMLC_* variables, in that order of precedence; or from a cluster file (`--cluster FILE`, the
// same JSON as TF_CONFIG). Pure: reads variables through `getenv`, so tests pass their own.
//
// Global ranks are laid out workers first (0..W-1), then servers (W..W+S-1), then the
// evaluator (W+S). The chief is worker 0: it trains like every worker and also makes the
// job's decisions (TF's convention when the cluster names no "chief" task).
//
// braid's variables, set together. A count without BRAID_ROLE is an error, and so is
// BRAID_ROLE_INDEX without BRAID_ROLE or DMLC_ROLE: a stale one left in a script is never
// silently ignored.
//   BRAID_ROLE            worker | ps | evaluator
//   BRAID_ROLE_INDEX      this process's index within its role, in [0, that role's count)
//   BRAID_NUM_WORKERS     W >= 1
//   BRAID_NUM_SERVERS     S >= 1
//   BRAID_NUM_EVALUATORS  0 | 1 (unset: 0)
//   BRAID_STORE_ADDR      host:port of the store (optional here; read_rank_env reads it too)
//
// TF_CONFIG (and the cluster file): {"cluster": {"chief": ["host:port"], "worker": [...],
// "ps": [...], "evaluator": [...]}, "task": {"type": "worker", "index": 1}}. Other top-level
// keys ("environment", "rpc_layer") are ignored. In braid the chief is worker 0 and TF's
// workers shift up by one: {"type": "worker", "index": i} is worker i+1 when a chief exists,
// worker i otherwise, so worker_addrs is [chief, worker 0, worker 1, ...]. (TF's
// ParameterServerStrategy chief only coordinates; braid's also trains.) The evaluator is at
// most one task, outside the training group. The store's address is worker 0's host:port,
// that is the chief's when there is one: worker 0 hosts the store on that port.
//
// ps-lite's variables: DMLC_ROLE (worker | server), DMLC_NUM_WORKER, DMLC_NUM_SERVER, and
// DMLC_PS_ROOT_URI with DMLC_PS_ROOT_PORT, the scheduler's address, which becomes the store's
// (both or neither). braid has no scheduler: DMLC_ROLE=scheduler is an error saying to start
// only workers and servers. ps-lite gives no index: it comes from BRAID_ROLE_INDEX when set,
// else index is -1, meaning the rendezvous assigns one.
//
// Both TF_CONFIG and DMLC_ROLE set: TF_CONFIG is read, and the DMLC variables must agree with
// it (role, counts, and BRAID_ROLE_INDEX if set), else an Error naming both: two foreign
// descriptions of one job that disagree mean the job is misconfigured, and neither is more
// likely right. braid's variables, written by `braid launch` for this very process, win over
// both without a check (as in env.h).
//
// Every malformed or inconsistent value is a braid::Error naming where it was read (the
// variable, or TF_CONFIG / the file's path with the JSON key), its value and what is accepted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launch/env.h"

namespace braid::launch {

enum class Role : uint8_t { worker, server, evaluator };

// "worker", "ps", "evaluator": the names BRAID_ROLE and TF_CONFIG use.
std::string_view role_name(Role r);

struct ClusterSpec {
  int num_workers = 0;  // the chief included
  int num_servers = 0;
  bool has_evaluator = false;
  // "host:port" of each task, as given; empty when the convention names none (braid, DMLC).
  // worker_addrs[0] is the chief's.
  std::vector<std::string> worker_addrs, server_addrs;
  std::string evaluator_addr;
  Role role = Role::worker;
  int index = 0;  // within the role; -1: assigned at rendezvous (DMLC without an index)
  // The store's address when the convention gives one (BRAID_STORE_ADDR, worker 0's address,
  // DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT); otherwise empty and 0, and the caller falls back to
  // read_rank_env's.
  std::string store_host;
  uint16_t store_port = 0;
  std::string source;  // "braid", "tf_config", "cluster_file" or "dmlc"

  int world_size() const;   // workers + servers + evaluator
  int global_rank() const;  // the layout above; -1 when index is -1
  bool is_chief() const;    // worker 0
};

// Nullopt when no convention's role variable (BRAID_ROLE, TF_CONFIG, DMLC_ROLE) is set:
// not a parameter-server job. Empty values count as unset.
std::optional<ClusterSpec> read_cluster_spec(const GetEnv& getenv = ::getenv);

// Parses TF_CONFIG's JSON; `where` ("TF_CONFIG" or a file's path) prefixes every error.
// source is "tf_config".
ClusterSpec parse_tf_config(const std::string& json_text, const std::string& where);

// The same JSON from a file (`braid launch --cluster FILE`); source is "cluster_file". IoError
// when it cannot be read.
ClusterSpec read_cluster_file(const std::string& path);

// The variables join_job reads (launch/job.h), with this process's place taken from the
// spec where the environment names none: a spec read from TF_CONFIG or DMLC_* on hosts
// that no braid launcher started gives BRAID_RANK (its global_rank()), BRAID_WORLD_SIZE
// and BRAID_STORE_ADDR. Variables already set win. braid::Error when the spec gives no
// index (DMLC without BRAID_ROLE_INDEX) and nothing else names the rank.
GetEnv job_env(const ClusterSpec& spec, GetEnv base = ::getenv);

}  // namespace braid::launch
