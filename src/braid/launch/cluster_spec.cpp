// Reads the role conventions in precedence order (braid, TF_CONFIG, DMLC); the first whose
// role variable is set decides, and must then be complete and consistent.
#include "launch/cluster_spec.h"

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "launch/env_vars.h"

namespace braid::launch {
namespace {

using nlohmann::json;

constexpr const char* kTfConfigShape =
    R"({"cluster": {"chief": ["host:port"], "worker": [...], "ps": [...]}, )"
    R"("task": {"type": "worker", "index": 0}})";

// `name`, which the variable `set_by` (a role variable) needs beside it; an error saying
// why (`hint`) when it is unset.
EnvVar required(const GetEnv& getenv, const char* name, const char* set_by, const char* hint) {
  const std::optional<EnvVar> v = first_set(getenv, {name});
  if (!v) BRAID_THROW(Error, set_by, " is set but ", name, " is not: ", hint);
  return *v;
}

int role_count(const ClusterSpec& s) {
  switch (s.role) {
    case Role::worker:
      return s.num_workers;
    case Role::server:
      return s.num_servers;
    case Role::evaluator:
      return s.has_evaluator ? 1 : 0;
  }
  return 0;
}

// BRAID_ROLE_INDEX, within the count of this process's role (`count`, e.g. "BRAID_NUM_SERVERS=2").
int read_index(const EnvVar& var, const ClusterSpec& s, const std::string& count) {
  const int index = int_var(var, 0, "this process's index within its role");
  if (index >= role_count(s))
    BRAID_THROW(Error, var.name, "=", index, " but ", count, ": a ", role_name(s.role),
                " index must be in [0, ", role_count(s), ")");
  return index;
}

// A JSON value as it reads in a message: compact, cut at 80 characters.
std::string shown(const json& j) {
  std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

ClusterSpec read_braid(const GetEnv& getenv, const EnvVar& role) {
  ClusterSpec s;
  s.source = "braid";
  if (role.value == "worker")
    s.role = Role::worker;
  else if (role.value == "ps")
    s.role = Role::server;
  else if (role.value == "evaluator")
    s.role = Role::evaluator;
  else
    BRAID_THROW(Error, "BRAID_ROLE='", role.value,
                "' is not valid: expected worker, ps or evaluator");
  auto need = [&](const char* name) {
    return required(getenv, name, role.name,
                    "braid's role variables come together (`braid launch --servers S "
                    "--workers W` sets them all)");
  };
  const EnvVar workers = need("BRAID_NUM_WORKERS");
  const EnvVar servers = need("BRAID_NUM_SERVERS");
  s.num_workers = int_var(workers, 1, "the number of workers");
  s.num_servers = int_var(servers, 1, "the number of parameter servers");
  const std::optional<EnvVar> evaluators = first_set(getenv, {"BRAID_NUM_EVALUATORS"});
  if (evaluators) {
    if (evaluators->value != "0" && evaluators->value != "1")
      BRAID_THROW(Error, "BRAID_NUM_EVALUATORS='", evaluators->value,
                  "' is not valid: expected 0 or 1 (a job has at most one evaluator)");
    s.has_evaluator = evaluators->value == "1";
  }
  if (s.role == Role::evaluator && !s.has_evaluator)
    BRAID_THROW(Error, "BRAID_ROLE=evaluator but BRAID_NUM_EVALUATORS",
                evaluators ? "=" + evaluators->value : std::string(" is unset"),
                ": a job with an evaluator sets BRAID_NUM_EVALUATORS=1");
  const std::string count = s.role == Role::worker   ? "BRAID_NUM_WORKERS=" + workers.value
                            : s.role == Role::server ? "BRAID_NUM_SERVERS=" + servers.value
                                                     : "BRAID_NUM_EVALUATORS=1";
  s.index = read_index(need("BRAID_ROLE_INDEX"), s, count);
  if (const std::optional<EnvVar> addr = first_set(getenv, {"BRAID_STORE_ADDR"}))
    parse_store_address(addr->name, addr->value, s.store_host, s.store_port);
  return s;
}

ClusterSpec read_dmlc(const GetEnv& getenv, const EnvVar& role) {
  ClusterSpec s;
  s.source = "dmlc";
  if (role.value == "scheduler")
    BRAID_THROW(Error,
                "DMLC_ROLE=scheduler: braid needs no scheduler process (workers and servers meet "
                "at the store, at DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT); start only the workers "
                "(DMLC_ROLE=worker) and the servers (DMLC_ROLE=server)");
  if (role.value == "worker")
    s.role = Role::worker;
  else if (role.value == "server")
    s.role = Role::server;
  else
    BRAID_THROW(Error, "DMLC_ROLE='", role.value,
                "' is not valid: expected worker or server (braid needs no scheduler)");
  auto need = [&](const char* name) {
    return required(getenv, name, role.name,
                    "ps-lite's convention needs DMLC_NUM_WORKER and DMLC_NUM_SERVER");
  };
  const EnvVar workers = need("DMLC_NUM_WORKER");
  const EnvVar servers = need("DMLC_NUM_SERVER");
  s.num_workers = int_var(workers, 1, "the number of workers");
  s.num_servers = int_var(servers, 1, "the number of servers");
  const std::optional<EnvVar> uri = first_set(getenv, {"DMLC_PS_ROOT_URI"});
  const std::optional<EnvVar> port = first_set(getenv, {"DMLC_PS_ROOT_PORT"});
  if (uri || port) {
    if (!uri || !port)
      BRAID_THROW(Error, uri ? "DMLC_PS_ROOT_URI" : "DMLC_PS_ROOT_PORT", " is set but ",
                  uri ? "DMLC_PS_ROOT_PORT" : "DMLC_PS_ROOT_URI",
                  " is not: the store's address needs both");
    const std::optional<int64_t> p = parse_decimal(port->value);
    if (!p || *p < 1 || *p > 65535)
      BRAID_THROW(Error, "DMLC_PS_ROOT_PORT='", port->value,
                  "' is not valid: expected a port, an integer in [1, 65535]");
    s.store_host = uri->value;
    s.store_port = static_cast<uint16_t>(*p);
  }
  if (const std::optional<EnvVar> index = first_set(getenv, {"BRAID_ROLE_INDEX"}))
    s.index = read_index(*index, s,
                         s.role == Role::worker ? "DMLC_NUM_WORKER=" + workers.value
                                                : "DMLC_NUM_SERVER=" + servers.value);
  else
    s.index = -1;
  return s;
}

// TF_CONFIG and DMLC_* both set: TF_CONFIG is read, and DMLC must describe the same process.
void check_agree(const ClusterSpec& tf, const ClusterSpec& dmlc) {
  const std::string_view dmlc_role = dmlc.role == Role::worker ? "worker" : "server";
  if (tf.role != dmlc.role)
    BRAID_THROW(Error, "TF_CONFIG gives this process the role ", role_name(tf.role),
                " but DMLC_ROLE=", dmlc_role,
                ": the two describe this process differently; unset one of them");
  if (tf.num_workers != dmlc.num_workers)
    BRAID_THROW(Error, "TF_CONFIG's cluster has ", tf.num_workers,
                " workers (the chief included) but DMLC_NUM_WORKER=", dmlc.num_workers,
                ": the two describe the job differently; unset one of them");
  if (tf.num_servers != dmlc.num_servers)
    BRAID_THROW(Error, "TF_CONFIG's cluster.ps has ", tf.num_servers,
                " tasks but DMLC_NUM_SERVER=", dmlc.num_servers,
                ": the two describe the job differently; unset one of them");
  if (dmlc.index != -1 && dmlc.index != tf.index)
    BRAID_THROW(Error, "TF_CONFIG gives this process ", role_name(tf.role), " index ", tf.index,
                tf.role == Role::worker ? " (the chief is worker 0)" : "",
                " but BRAID_ROLE_INDEX=", dmlc.index,
                ": the two describe this process differently; unset one of them");
}

}  // namespace

std::string_view role_name(Role r) {
  switch (r) {
    case Role::worker:
      return "worker";
    case Role::server:
      return "ps";
    case Role::evaluator:
      return "evaluator";
  }
  return "?";
}

int ClusterSpec::world_size() const { return num_workers + num_servers + (has_evaluator ? 1 : 0); }

int ClusterSpec::global_rank() const {
  if (index < 0) return -1;
  switch (role) {
    case Role::worker:
      return index;
    case Role::server:
      return num_workers + index;
    case Role::evaluator:
      return num_workers + num_servers;
  }
  return -1;
}

bool ClusterSpec::is_chief() const { return role == Role::worker && index == 0; }

ClusterSpec parse_tf_config(const std::string& json_text, const std::string& where) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    const std::string text = json_text.size() > 80 ? json_text.substr(0, 77) + "..." : json_text;
    BRAID_THROW(Error, where, ": not valid JSON (", e.what(), "): '", text, "'; expected ",
                kTfConfigShape);
  }
  if (!j.is_object())
    BRAID_THROW(Error, where, ": ", shown(j), " is not valid: expected an object, ",
                kTfConfigShape);

  // Each task type's "host:port" list, each address checked.
  const auto cluster = j.find("cluster");
  if (cluster == j.end())
    BRAID_THROW(Error, where, ": \"cluster\" is missing: expected ", kTfConfigShape,
                where == "TF_CONFIG" ? " (a job without roles leaves TF_CONFIG unset)" : "");
  if (!cluster->is_object())
    BRAID_THROW(Error, where, ": cluster=", shown(*cluster),
                " is not valid: expected an object of task lists, ", kTfConfigShape);
  std::map<std::string, std::vector<std::string>> tasks;
  for (const char* type : {"chief", "worker", "ps", "evaluator"}) tasks[type];
  std::map<std::string, std::string> owner;  // address -> the entry that listed it first
  for (auto it = cluster->begin(); it != cluster->end(); ++it) {
    const std::string key = "cluster." + it.key();
    if (!tasks.contains(it.key()))
      BRAID_THROW(Error, where, ": ", key, " names an unknown task type '", it.key(),
                  "': expected chief, worker, ps or evaluator");
    if (!it->is_array())
      BRAID_THROW(Error, where, ": ", key, "=", shown(*it),
                  " is not valid: expected a list of \"host:port\" strings");
    std::vector<std::string>& addrs = tasks[it.key()];
    for (size_t i = 0; i < it->size(); ++i) {
      const json& a = (*it)[i];
      const std::string item = where + ": " + key + "[" + std::to_string(i) + "]";
      if (!a.is_string())
        BRAID_THROW(Error, item, "=", shown(a), " is not valid: expected a \"host:port\" string");
      std::string host;
      uint16_t port = 0;
      parse_store_address(item, a.get<std::string>(), host, port);
      // Two tasks cannot listen on one host:port.
      const auto [first, fresh] =
          owner.emplace(a.get<std::string>(), key + "[" + std::to_string(i) + "]");
      if (!fresh)
        BRAID_THROW(Error, item, "=", shown(a), " repeats the address of ", first->second,
                    ": every task needs its own host:port");
      addrs.push_back(a.get<std::string>());
    }
  }
  for (const char* type : {"chief", "evaluator"})
    if (tasks[type].size() > 1)
      BRAID_THROW(Error, where, ": cluster.", type, "=", shown((*cluster)[type]), " lists ",
                  tasks[type].size(), " tasks: expected at most one");
  if (tasks["chief"].empty() && tasks["worker"].empty())
    BRAID_THROW(Error, where, ": cluster=", shown(*cluster),
                " has no worker: expected at least one \"worker\" or \"chief\" task");
  if (tasks["ps"].empty())
    BRAID_THROW(Error, where, ": cluster=", shown(*cluster),
                " has no \"ps\" task: a parameter-server job needs at least one server");

  ClusterSpec s;
  s.source = "tf_config";
  s.worker_addrs = tasks["chief"];
  s.worker_addrs.insert(s.worker_addrs.end(), tasks["worker"].begin(), tasks["worker"].end());
  s.server_addrs = tasks["ps"];
  s.num_workers = static_cast<int>(s.worker_addrs.size());
  s.num_servers = static_cast<int>(s.server_addrs.size());
  s.has_evaluator = !tasks["evaluator"].empty();
  if (s.has_evaluator) s.evaluator_addr = tasks["evaluator"][0];
  parse_store_address(where + ": the store (worker 0)", s.worker_addrs[0], s.store_host,
                      s.store_port);

  // This process's task.
  const auto task = j.find("task");
  if (task == j.end() || !task->is_object())
    BRAID_THROW(Error, where, ": task", task == j.end() ? " is missing" : "=" + shown(*task),
                ": expected this process's task, e.g. {\"type\": \"worker\", \"index\": 0}");
  const auto type = task->find("type");
  if (type == task->end())
    BRAID_THROW(Error, where, ": task.type is missing: expected chief, worker, ps or evaluator");
  const std::string type_name = type->is_string() ? type->get<std::string>() : "";
  if (!tasks.contains(type_name))
    BRAID_THROW(Error, where, ": task.type=", shown(*type),
                " is not valid: expected \"chief\", \"worker\", \"ps\" or \"evaluator\"");
  const size_t count = tasks[type_name].size();
  if (count == 0)
    BRAID_THROW(Error, where, ": task.type=\"", type_name, "\" but cluster.", type_name,
                " lists no task: expected a type that cluster lists");
  const auto index = task->find("index");
  if (index == task->end())
    BRAID_THROW(Error, where, ": task.index is missing: expected this task's index in cluster.",
                type_name, ", an integer in [0, ", count, ")");
  // nlohmann reads non-negative integers as unsigned, negative ones as signed.
  if (!index->is_number_unsigned() || index->get<uint64_t>() >= count)
    BRAID_THROW(Error, where, ": task.index=", shown(*index), " is not valid: cluster.", type_name,
                " lists ", count, " task", count == 1 ? "" : "s",
                ", so expected an integer in [0, ", count, ")");
  const int i = static_cast<int>(index->get<uint64_t>());
  if (type_name == "chief") {
    s.role = Role::worker;
    s.index = 0;
  } else if (type_name == "worker") {
    s.role = Role::worker;
    s.index = i + static_cast<int>(tasks["chief"].size());  // the chief is worker 0
  } else if (type_name == "ps") {
    s.role = Role::server;
    s.index = i;
  } else {
    s.role = Role::evaluator;
    s.index = 0;
  }
  return s;
}

ClusterSpec read_cluster_file(const std::string& path) {
  if (std::filesystem::is_directory(path))
    BRAID_THROW(IoError, "cluster file '", path, "' is a directory: expected a JSON file, ",
                kTfConfigShape);
  std::ifstream in(path);
  if (!in) BRAID_THROW(IoError, "cluster file '", path, "': cannot open it (does the file exist?)");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) BRAID_THROW(IoError, "cluster file '", path, "': cannot read it");
  ClusterSpec s = parse_tf_config(text.str(), path);
  s.source = "cluster_file";
  return s;
}

std::optional<ClusterSpec> read_cluster_spec(const GetEnv& getenv) {
  if (const std::optional<EnvVar> role = first_set(getenv, {"BRAID_ROLE"}))
    return read_braid(getenv, *role);
  // A stale braid variable would otherwise be ignored without a word.
  for (const char* name : {"BRAID_NUM_WORKERS", "BRAID_NUM_SERVERS", "BRAID_NUM_EVALUATORS"})
    if (const std::optional<EnvVar> v = first_set(getenv, {name}))
      BRAID_THROW(Error, name, "='", v->value,
                  "' is set but BRAID_ROLE is not: braid's role variables come together "
                  "(`braid launch --servers S --workers W` sets them all); set BRAID_ROLE or "
                  "unset ",
                  name);
  const std::optional<EnvVar> tf = first_set(getenv, {"TF_CONFIG"});
  const std::optional<EnvVar> dmlc = first_set(getenv, {"DMLC_ROLE"});
  if (!dmlc)
    if (const std::optional<EnvVar> index = first_set(getenv, {"BRAID_ROLE_INDEX"}))
      BRAID_THROW(Error, "BRAID_ROLE_INDEX='", index->value,
                  "' is set but neither BRAID_ROLE nor DMLC_ROLE is: it is the index of a braid "
                  "or ps-lite role (TF_CONFIG gives its own task.index); set the role or unset "
                  "BRAID_ROLE_INDEX");
  if (tf) {
    ClusterSpec s = parse_tf_config(tf->value, "TF_CONFIG");
    if (dmlc) check_agree(s, read_dmlc(getenv, *dmlc));
    return s;
  }
  if (dmlc) return read_dmlc(getenv, *dmlc);
  return std::nullopt;
}

GetEnv job_env(const ClusterSpec& spec, GetEnv base) {
  auto filled = std::make_shared<std::map<std::string, std::string>>();
  const auto unset = [&](const char* name) {
    const char* v = base(name);
    return v == nullptr || *v == '\0';
  };
  if (unset("BRAID_RANK") && unset("RANK") && unset("OMPI_COMM_WORLD_RANK") && unset("PMI_RANK") &&
      unset("SLURM_PROCID")) {
    BRAID_CHECK(spec.index >= 0, "the ", spec.source,
                " description gives this process no index within its role and no launcher "
                "variable names its rank: set BRAID_ROLE_INDEX (or BRAID_RANK)");
    (*filled)["BRAID_RANK"] = std::to_string(spec.global_rank());
    (*filled)["BRAID_WORLD_SIZE"] = std::to_string(spec.world_size());
  }
  if (unset("BRAID_STORE_ADDR") && !spec.store_host.empty())
    (*filled)["BRAID_STORE_ADDR"] = spec.store_host + ":" + std::to_string(spec.store_port);
  if (filled->empty()) return base;
  return [filled, base = std::move(base)](const char* name) -> const char* {
    const auto it = filled->find(name);
    return it != filled->end() ? it->second.c_str() : base(name);
  };
}

}  // namespace braid::launch
