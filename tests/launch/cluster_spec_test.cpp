// read_cluster_spec, parse_tf_config and read_cluster_file over a fake environment and
// temporary files: each convention's roles, indices, counts, addresses and global ranks,
// their precedence, and the errors for malformed or inconsistent values.
#include "launch/cluster_spec.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "fake_env.h"
#include "temp_dir.h"

namespace braid::launch {
namespace {

using testing::fake;
using testing::TempDir;
using testing::Vars;

// The message of the Error that `f` throws, or "" when it does not throw.
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_fragments(const std::string& message, std::initializer_list<std::string> fragments) {
  ASSERT_FALSE(message.empty()) << "no error";
  for (const std::string& f : fragments)
    EXPECT_NE(message.find(f), std::string::npos) << "'" << f << "' not in: " << message;
}

void expect_error(const Vars& vars, std::initializer_list<std::string> fragments) {
  expect_fragments(error_of([&] { read_cluster_spec(fake(vars)); }), fragments);
}

void expect_tf_error(const std::string& json_text, std::initializer_list<std::string> fragments) {
  expect_fragments(error_of([&] { parse_tf_config(json_text, "TF_CONFIG"); }), fragments);
}

// A job of a chief, two workers, two servers and an evaluator: 3 workers in braid's terms.
const char* const kFullCluster =
    R"("cluster": {"chief": ["c0:2000"], "worker": ["w0:2001", "w1:2002"],)"
    R"( "ps": ["p0:3000", "p1:3001"], "evaluator": ["e0:4000"]})";

std::string tf_config(const std::string& type, int index) {
  return std::string("{") + kFullCluster + R"(, "task": {"type": ")" + type + R"(", "index": )" +
         std::to_string(index) + "}}";
}

// The braid variables of a job of 2 workers, 3 servers and an evaluator, for one role.
Vars braid_vars(const std::string& role, const std::string& index) {
  return {{"BRAID_ROLE", role},
          {"BRAID_ROLE_INDEX", index},
          {"BRAID_NUM_WORKERS", "2"},
          {"BRAID_NUM_SERVERS", "3"},
          {"BRAID_NUM_EVALUATORS", "1"}};
}

Vars dmlc_vars(const std::string& role) {
  return {{"DMLC_ROLE", role},
          {"DMLC_NUM_WORKER", "4"},
          {"DMLC_NUM_SERVER", "2"},
          {"DMLC_PS_ROOT_URI", "10.1.0.9"},
          {"DMLC_PS_ROOT_PORT", "9091"}};
}

TEST(ClusterSpec, RoleNames) {
  EXPECT_EQ(role_name(Role::worker), "worker");
  EXPECT_EQ(role_name(Role::server), "ps");
  EXPECT_EQ(role_name(Role::evaluator), "evaluator");
}

TEST(ClusterSpec, NoVariablesIsNotARoleJob) {
  EXPECT_FALSE(read_cluster_spec(fake({})).has_value());
  // Empty values count as unset; a plain data-parallel job's variables are not a role job.
  EXPECT_FALSE(read_cluster_spec(fake({{"BRAID_ROLE", ""}, {"TF_CONFIG", ""}, {"DMLC_ROLE", ""}}))
                   .has_value());
  EXPECT_FALSE(
      read_cluster_spec(fake({{"BRAID_RANK", "1"}, {"BRAID_WORLD_SIZE", "2"}})).has_value());
}

TEST(ClusterSpec, BraidEveryRole) {
  Vars vars = braid_vars("worker", "0");
  vars["BRAID_STORE_ADDR"] = "10.0.0.1:29400";
  const ClusterSpec w = *read_cluster_spec(fake(vars));
  EXPECT_EQ(w.source, "braid");
  EXPECT_EQ(w.role, Role::worker);
  EXPECT_EQ(w.index, 0);
  EXPECT_EQ(w.num_workers, 2);
  EXPECT_EQ(w.num_servers, 3);
  EXPECT_TRUE(w.has_evaluator);
  EXPECT_EQ(w.world_size(), 6);
  EXPECT_EQ(w.global_rank(), 0);
  EXPECT_TRUE(w.is_chief());
  EXPECT_TRUE(w.worker_addrs.empty());
  EXPECT_TRUE(w.server_addrs.empty());
  EXPECT_EQ(w.store_host, "10.0.0.1");
  EXPECT_EQ(w.store_port, 29400);

  const ClusterSpec w1 = *read_cluster_spec(fake(braid_vars("worker", "1")));
  EXPECT_EQ(w1.global_rank(), 1);
  EXPECT_FALSE(w1.is_chief());
  EXPECT_TRUE(w1.store_host.empty());
  EXPECT_EQ(w1.store_port, 0);

  const ClusterSpec ps = *read_cluster_spec(fake(braid_vars("ps", "2")));
  EXPECT_EQ(ps.role, Role::server);
  EXPECT_EQ(ps.index, 2);
  EXPECT_EQ(ps.global_rank(), 4);  // after the 2 workers
  EXPECT_FALSE(ps.is_chief());

  const ClusterSpec ev = *read_cluster_spec(fake(braid_vars("evaluator", "0")));
  EXPECT_EQ(ev.role, Role::evaluator);
  EXPECT_EQ(ev.global_rank(), 5);  // after workers and servers
  EXPECT_FALSE(ev.is_chief());
}

TEST(ClusterSpec, BraidWithoutEvaluator) {
  Vars vars = braid_vars("ps", "0");
  vars.erase("BRAID_NUM_EVALUATORS");
  const ClusterSpec s = *read_cluster_spec(fake(vars));
  EXPECT_FALSE(s.has_evaluator);
  EXPECT_EQ(s.world_size(), 5);
  EXPECT_EQ(s.global_rank(), 2);
  vars["BRAID_NUM_EVALUATORS"] = "0";
  EXPECT_FALSE(read_cluster_spec(fake(vars))->has_evaluator);
}

TEST(ClusterSpec, BraidErrors) {
  expect_error(braid_vars("server", "0"), {"BRAID_ROLE='server'", "worker, ps or evaluator"});
  expect_error(braid_vars("worker", "2"),
               {"BRAID_ROLE_INDEX=2", "BRAID_NUM_WORKERS=2", "worker index", "[0, 2)"});
  expect_error(braid_vars("ps", "3"), {"BRAID_ROLE_INDEX=3", "BRAID_NUM_SERVERS=3", "[0, 3)"});
  expect_error(braid_vars("evaluator", "1"), {"BRAID_ROLE_INDEX=1", "[0, 1)"});
  expect_error(braid_vars("worker", "-1"), {"BRAID_ROLE_INDEX='-1'", "integer >= 0"});
  expect_error(braid_vars("worker", "one"), {"BRAID_ROLE_INDEX='one'", "index"});
  for (const char* name : {"BRAID_ROLE_INDEX", "BRAID_NUM_WORKERS", "BRAID_NUM_SERVERS"}) {
    Vars vars = braid_vars("worker", "0");
    vars.erase(name);
    expect_error(vars, {std::string("BRAID_ROLE is set but ") + name + " is not", "braid launch"});
  }
  Vars vars = braid_vars("worker", "0");
  vars["BRAID_NUM_SERVERS"] = "0";
  expect_error(vars, {"BRAID_NUM_SERVERS='0'", "parameter servers", "integer >= 1"});
  vars = braid_vars("worker", "0");
  vars["BRAID_NUM_WORKERS"] = "2x";
  expect_error(vars, {"BRAID_NUM_WORKERS='2x'", "number of workers"});
  vars = braid_vars("worker", "0");
  vars["BRAID_NUM_EVALUATORS"] = "2";
  expect_error(vars, {"BRAID_NUM_EVALUATORS='2'", "0 or 1"});
  vars = braid_vars("evaluator", "0");
  vars["BRAID_NUM_EVALUATORS"] = "0";
  expect_error(vars, {"BRAID_ROLE=evaluator", "BRAID_NUM_EVALUATORS=0"});
  vars.erase("BRAID_NUM_EVALUATORS");
  expect_error(vars, {"BRAID_ROLE=evaluator", "BRAID_NUM_EVALUATORS is unset"});
  vars = braid_vars("worker", "0");
  vars["BRAID_STORE_ADDR"] = "nohost";
  expect_error(vars, {"BRAID_STORE_ADDR='nohost'", "host:port"});
}

TEST(ClusterSpec, BraidVariablesWithoutARoleAreAnError) {
  expect_error({{"BRAID_NUM_WORKERS", "2"}}, {"BRAID_NUM_WORKERS='2'", "BRAID_ROLE is not"});
  expect_error({{"BRAID_NUM_EVALUATORS", "1"}, {"TF_CONFIG", tf_config("worker", 0)}},
               {"BRAID_NUM_EVALUATORS='1'", "BRAID_ROLE is not"});
  expect_error({{"BRAID_ROLE_INDEX", "1"}}, {"BRAID_ROLE_INDEX='1'", "neither BRAID_ROLE nor"});
  expect_error({{"BRAID_ROLE_INDEX", "1"}, {"TF_CONFIG", tf_config("ps", 1)}},
               {"BRAID_ROLE_INDEX='1'", "task.index"});
}

TEST(ClusterSpec, TfConfigChiefWorkersPsEvaluator) {
  struct Case {
    std::string type;
    int tf_index;
    Role role;
    int index, global_rank;
    bool chief;
  };
  // 3 workers (chief, w0, w1) at ranks 0..2, servers at 3..4, the evaluator at 5.
  for (const Case& c : std::vector<Case>{{"chief", 0, Role::worker, 0, 0, true},
                                         {"worker", 0, Role::worker, 1, 1, false},
                                         {"worker", 1, Role::worker, 2, 2, false},
                                         {"ps", 0, Role::server, 0, 3, false},
                                         {"ps", 1, Role::server, 1, 4, false},
                                         {"evaluator", 0, Role::evaluator, 0, 5, false}}) {
    SCOPED_TRACE(c.type + " " + std::to_string(c.tf_index));
    const ClusterSpec s = *read_cluster_spec(fake({{"TF_CONFIG", tf_config(c.type, c.tf_index)}}));
    EXPECT_EQ(s.source, "tf_config");
    EXPECT_EQ(s.role, c.role);
    EXPECT_EQ(s.index, c.index);
    EXPECT_EQ(s.global_rank(), c.global_rank);
    EXPECT_EQ(s.is_chief(), c.chief);
    EXPECT_EQ(s.num_workers, 3);
    EXPECT_EQ(s.num_servers, 2);
    EXPECT_TRUE(s.has_evaluator);
    EXPECT_EQ(s.world_size(), 6);
    EXPECT_EQ(s.worker_addrs, (std::vector<std::string>{"c0:2000", "w0:2001", "w1:2002"}));
    EXPECT_EQ(s.server_addrs, (std::vector<std::string>{"p0:3000", "p1:3001"}));
    EXPECT_EQ(s.evaluator_addr, "e0:4000");
    // The chief's address is the store's.
    EXPECT_EQ(s.store_host, "c0");
    EXPECT_EQ(s.store_port, 2000);
  }
}

TEST(ClusterSpec, TfConfigWithoutChiefStoreIsWorkerZero) {
  const ClusterSpec s = parse_tf_config(
      R"({"cluster": {"worker": ["[::1]:5000", "w1:5001"], "ps": ["p0:6000"]},
          "task": {"type": "worker", "index": 1},
          "environment": "cloud", "rpc_layer": "grpc"})",
      "TF_CONFIG");
  EXPECT_EQ(s.role, Role::worker);
  EXPECT_EQ(s.index, 1);
  EXPECT_EQ(s.global_rank(), 1);
  EXPECT_FALSE(s.is_chief());
  EXPECT_EQ(s.num_workers, 2);
  EXPECT_EQ(s.num_servers, 1);
  EXPECT_FALSE(s.has_evaluator);
  EXPECT_TRUE(s.evaluator_addr.empty());
  EXPECT_EQ(s.world_size(), 3);
  EXPECT_EQ(s.worker_addrs[0], "[::1]:5000");
  EXPECT_EQ(s.store_host, "::1");
  EXPECT_EQ(s.store_port, 5000);
  const ClusterSpec w0 = parse_tf_config(
      R"({"cluster": {"worker": ["w0:1"], "ps": ["p0:2"]}, "task": {"type": "worker", "index": 0}})",
      "TF_CONFIG");
  EXPECT_TRUE(w0.is_chief());
  EXPECT_EQ(w0.global_rank(), 0);
}

TEST(ClusterSpec, TfConfigMalformedJson) {
  expect_tf_error(R"({"cluster": )", {"TF_CONFIG", "not valid JSON", R"('{"cluster": ')"});
  expect_tf_error("[1, 2]", {"TF_CONFIG", "[1,2]", "expected an object"});
  const std::string huge = "{\"cluster\": " + std::string(200, 'x');
  const std::string message = error_of([&] { parse_tf_config(huge, "TF_CONFIG"); });
  EXPECT_LT(message.size(), 600u) << "the value is cut short: " << message;
}

TEST(ClusterSpec, TfConfigClusterErrors) {
  expect_tf_error(R"({"task": {"type": "worker", "index": 0}})",
                  {"TF_CONFIG", "\"cluster\" is missing"});
  expect_tf_error(R"({"cluster": ["w0:1"], "task": {"type": "worker", "index": 0}})",
                  {"TF_CONFIG", R"(cluster=["w0:1"])", "expected an object"});
  expect_tf_error(R"({"cluster": {"master": ["m:1"], "worker": ["w:1"], "ps": ["p:1"]}})",
                  {"TF_CONFIG", "cluster.master", "'master'", "chief, worker, ps or evaluator"});
  expect_tf_error(R"({"cluster": {"worker": "w0:1", "ps": ["p:1"]}})",
                  {"TF_CONFIG", R"(cluster.worker="w0:1")", "list of \"host:port\" strings"});
  expect_tf_error(R"({"cluster": {"worker": ["w0:1", 7], "ps": ["p:1"]}})",
                  {"TF_CONFIG", "cluster.worker[1]=7", "\"host:port\" string"});
  expect_tf_error(R"({"cluster": {"worker": ["w0:1"], "ps": ["p:1", "nohost"]}})",
                  {"TF_CONFIG: cluster.ps[1]='nohost'", "host:port", "[1, 65535]"});
  expect_tf_error(R"({"cluster": {"worker": ["w0:70000"], "ps": ["p:1"]}})",
                  {"cluster.worker[0]='w0:70000'"});
  expect_tf_error(R"({"cluster": {"worker": ["h:1", "h:2"], "ps": ["h:2"]}})",
                  {"TF_CONFIG: cluster.worker[1]=\"h:2\"", "repeats the address of cluster.ps[0]",
                   "its own host:port"});
  expect_tf_error(R"({"cluster": {"chief": ["a:1", "b:1"], "ps": ["p:1"]}})",
                  {"TF_CONFIG", R"(cluster.chief=["a:1","b:1"])", "lists 2 tasks", "at most one"});
  expect_tf_error(R"({"cluster": {"worker": ["w:1"], "ps": ["p:1"], "evaluator": ["a:1", "b:1"]}})",
                  {"TF_CONFIG", "cluster.evaluator=", "lists 2 tasks", "at most one"});
  expect_tf_error(R"({"cluster": {"ps": ["p:1"], "evaluator": ["e:1"]}})",
                  {"TF_CONFIG", "has no worker", "\"worker\" or \"chief\""});
  expect_tf_error(R"({"cluster": {"chief": ["c:1"], "worker": [], "ps": []}})",
                  {"TF_CONFIG", "no \"ps\" task", "at least one server"});
}

TEST(ClusterSpec, TfConfigTaskErrors) {
  const std::string cluster = R"({"cluster": {"worker": ["w0:1", "w1:1"], "ps": ["p:1"]})";
  auto with_task = [&](const std::string& task) { return cluster + ", \"task\": " + task + "}"; };
  expect_tf_error(cluster + "}", {"TF_CONFIG", "task is missing"});
  expect_tf_error(with_task("3"), {"TF_CONFIG", "task=3"});
  expect_tf_error(with_task(R"({"index": 0})"), {"TF_CONFIG", "task.type is missing"});
  expect_tf_error(with_task(R"({"type": "master", "index": 0})"),
                  {"TF_CONFIG", R"(task.type="master")", R"("chief", "worker", "ps" or)"});
  expect_tf_error(with_task(R"({"type": 1, "index": 0})"), {"TF_CONFIG", "task.type=1"});
  expect_tf_error(with_task(R"({"type": "chief", "index": 0})"),
                  {"TF_CONFIG", R"(task.type="chief")", "cluster.chief lists no task"});
  expect_tf_error(with_task(R"({"type": "worker"})"),
                  {"TF_CONFIG", "task.index is missing", "cluster.worker", "[0, 2)"});
  for (const char* bad : {"-1", "1.5", "\"1\"", "2", "18446744073709551615"})
    expect_tf_error(
        with_task(std::string(R"({"type": "worker", "index": )") + bad + "}"),
        {"TF_CONFIG", std::string("task.index=") + bad, "cluster.worker lists 2 tasks", "[0, 2)"});
}

TEST(ClusterSpec, ClusterFile) {
  TempDir dir;
  const std::string path = dir.file("cluster.json");
  std::ofstream(path) << tf_config("ps", 1);
  const ClusterSpec s = read_cluster_file(path);
  EXPECT_EQ(s.source, "cluster_file");
  EXPECT_EQ(s.role, Role::server);
  EXPECT_EQ(s.index, 1);
  EXPECT_EQ(s.global_rank(), 4);
  EXPECT_EQ(s.world_size(), 6);
  EXPECT_EQ(s.store_host, "c0");

  // Errors name the file instead of TF_CONFIG.
  std::ofstream(path) << R"({"cluster": {"worker": ["w:1"], "ps": ["bad"]}})";
  expect_fragments(error_of([&] { read_cluster_file(path); }),
                   {path + ": cluster.ps[0]='bad'", "host:port"});
  std::ofstream(path) << "not json";
  expect_fragments(error_of([&] { read_cluster_file(path); }), {path + ": not valid JSON"});

  const std::string missing = dir.file("missing.json");
  expect_fragments(error_of([&] { read_cluster_file(missing); }),
                   {"cluster file '" + missing + "'", "cannot open"});
  EXPECT_THROW(read_cluster_file(missing), IoError);
  EXPECT_THROW(read_cluster_file(dir.path()), IoError);
}

TEST(ClusterSpec, Dmlc) {
  const ClusterSpec w = *read_cluster_spec(fake(dmlc_vars("worker")));
  EXPECT_EQ(w.source, "dmlc");
  EXPECT_EQ(w.role, Role::worker);
  EXPECT_EQ(w.num_workers, 4);
  EXPECT_EQ(w.num_servers, 2);
  EXPECT_FALSE(w.has_evaluator);
  EXPECT_EQ(w.world_size(), 6);
  EXPECT_EQ(w.index, -1);  // assigned at rendezvous
  EXPECT_EQ(w.global_rank(), -1);
  EXPECT_FALSE(w.is_chief());
  EXPECT_TRUE(w.worker_addrs.empty());
  EXPECT_EQ(w.store_host, "10.1.0.9");
  EXPECT_EQ(w.store_port, 9091);

  Vars vars = dmlc_vars("server");
  vars["BRAID_ROLE_INDEX"] = "1";
  vars.erase("DMLC_PS_ROOT_URI");
  vars.erase("DMLC_PS_ROOT_PORT");
  const ClusterSpec ps = *read_cluster_spec(fake(vars));
  EXPECT_EQ(ps.role, Role::server);
  EXPECT_EQ(ps.index, 1);
  EXPECT_EQ(ps.global_rank(), 5);
  EXPECT_TRUE(ps.store_host.empty());
  EXPECT_EQ(ps.store_port, 0);

  vars = dmlc_vars("worker");
  vars["BRAID_ROLE_INDEX"] = "0";
  EXPECT_TRUE(read_cluster_spec(fake(vars))->is_chief());
}

TEST(ClusterSpec, DmlcErrors) {
  expect_error(dmlc_vars("scheduler"), {"DMLC_ROLE=scheduler", "needs no scheduler",
                                        "DMLC_ROLE=worker", "DMLC_ROLE=server"});
  expect_error(dmlc_vars("ps"), {"DMLC_ROLE='ps'", "worker or server"});
  for (const char* name : {"DMLC_NUM_WORKER", "DMLC_NUM_SERVER"}) {
    for (const char* bad : {"0", "-2", "two"}) {
      Vars vars = dmlc_vars("worker");
      vars[name] = bad;
      expect_error(vars, {std::string(name) + "='" + bad + "'", "integer >= 1"});
    }
    Vars vars = dmlc_vars("worker");
    vars.erase(name);
    expect_error(vars, {std::string("DMLC_ROLE is set but ") + name + " is not"});
  }
  Vars vars = dmlc_vars("worker");
  vars.erase("DMLC_PS_ROOT_PORT");
  expect_error(vars, {"DMLC_PS_ROOT_URI is set but DMLC_PS_ROOT_PORT is not"});
  vars = dmlc_vars("worker");
  vars["DMLC_PS_ROOT_PORT"] = "0";
  expect_error(vars, {"DMLC_PS_ROOT_PORT='0'", "[1, 65535]"});
  vars = dmlc_vars("server");
  vars["BRAID_ROLE_INDEX"] = "2";
  expect_error(vars, {"BRAID_ROLE_INDEX=2", "DMLC_NUM_SERVER=2", "ps index", "[0, 2)"});
}

TEST(ClusterSpec, PrecedenceBraidTfConfigDmlc) {
  Vars all = braid_vars("ps", "1");
  all["TF_CONFIG"] = tf_config("worker", 1);
  all["DMLC_ROLE"] = "worker";
  all["DMLC_NUM_WORKER"] = "3";
  all["DMLC_NUM_SERVER"] = "2";
  // braid's variables win without a check, even where the others disagree.
  const ClusterSpec braid = *read_cluster_spec(fake(all));
  EXPECT_EQ(braid.source, "braid");
  EXPECT_EQ(braid.role, Role::server);
  EXPECT_EQ(braid.index, 1);
  for (const char* name : {"BRAID_ROLE", "BRAID_ROLE_INDEX", "BRAID_NUM_WORKERS",
                           "BRAID_NUM_SERVERS", "BRAID_NUM_EVALUATORS"})
    all.erase(name);
  // TF_CONFIG over DMLC variables that agree with it.
  const ClusterSpec tf = *read_cluster_spec(fake(all));
  EXPECT_EQ(tf.source, "tf_config");
  EXPECT_EQ(tf.index, 2);
  EXPECT_EQ(tf.store_host, "c0");
  all["BRAID_ROLE_INDEX"] = "2";  // agrees too: TF's worker 1 is braid's worker 2
  EXPECT_EQ(read_cluster_spec(fake(all))->source, "tf_config");
  all.erase("TF_CONFIG");
  EXPECT_EQ(read_cluster_spec(fake(all))->source, "dmlc");
}

TEST(ClusterSpec, TfConfigAndDmlcThatDisagreeAreRefused) {
  const Vars agree = {{"TF_CONFIG", tf_config("worker", 1)},
                      {"DMLC_ROLE", "worker"},
                      {"DMLC_NUM_WORKER", "3"},
                      {"DMLC_NUM_SERVER", "2"}};
  Vars vars = agree;
  vars["DMLC_ROLE"] = "server";
  expect_error(vars,
               {"TF_CONFIG gives this process the role worker", "DMLC_ROLE=server", "unset one"});
  vars = agree;
  vars["TF_CONFIG"] = tf_config("evaluator", 0);
  expect_error(vars, {"the role evaluator", "DMLC_ROLE=worker"});
  vars = agree;
  vars["DMLC_NUM_WORKER"] = "2";
  expect_error(vars, {"3 workers", "DMLC_NUM_WORKER=2"});
  vars = agree;
  vars["DMLC_NUM_SERVER"] = "4";
  expect_error(vars, {"cluster.ps has 2 tasks", "DMLC_NUM_SERVER=4"});
  vars = agree;
  vars["BRAID_ROLE_INDEX"] = "1";
  expect_error(vars, {"TF_CONFIG gives this process worker index 2", "BRAID_ROLE_INDEX=1"});
  vars = agree;
  vars["DMLC_ROLE"] = "scheduler";
  expect_error(vars, {"DMLC_ROLE=scheduler", "needs no scheduler"});
}

// job_env: a TF_CONFIG task started without a braid launcher gets its rank, the world size
// and the store's address from the spec; variables a launcher set win; a DMLC process
// without an index is an error saying what to set.
TEST(ClusterSpec, JobEnvFillsTheRankWorldAndStoreFromTheSpec) {
  const Vars vars{{"TF_CONFIG", tf_config("ps", 1)}};
  const ClusterSpec spec = *read_cluster_spec(fake(vars));
  const GetEnv env = job_env(spec, fake(vars));
  ASSERT_NE(env("BRAID_RANK"), nullptr);
  EXPECT_EQ(std::string(env("BRAID_RANK")), std::to_string(spec.global_rank()));
  EXPECT_EQ(std::string(env("BRAID_WORLD_SIZE")), "6");
  EXPECT_EQ(std::string(env("BRAID_STORE_ADDR")), "c0:2000");
  EXPECT_EQ(std::string(env("TF_CONFIG")), tf_config("ps", 1));  // the rest passes through

  Vars launched = vars;
  launched["BRAID_RANK"] = "4";
  launched["BRAID_STORE_ADDR"] = "127.0.0.1:5000";
  const GetEnv kept = job_env(spec, fake(launched));
  EXPECT_EQ(std::string(kept("BRAID_RANK")), "4");
  EXPECT_EQ(std::string(kept("BRAID_STORE_ADDR")), "127.0.0.1:5000");
  EXPECT_EQ(kept("BRAID_WORLD_SIZE"), nullptr);

  const Vars dmlc = dmlc_vars("server");
  const ClusterSpec unindexed = *read_cluster_spec(fake(dmlc));
  expect_fragments(error_of([&] { job_env(unindexed, fake(dmlc)); }), {"set BRAID_ROLE_INDEX"});
}

}  // namespace
}  // namespace braid::launch
