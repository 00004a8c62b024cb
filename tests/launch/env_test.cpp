// read_rank_env and read_timeout over a fake environment: every launcher's convention,
// their precedence, and the errors for malformed or inconsistent values.
#include "launch/env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "comm/deadline.h"
#include "core/error.h"
#include "fake_env.h"
#include "launch/job.h"
#include "launch/job_id.h"

namespace braid::launch {
namespace {

using testing::fake;
using testing::Vars;

// The message of the Error that reading `vars` throws, or "" when it does not throw.
std::string error_of(const Vars& vars) {
  try {
    read_rank_env(fake(vars));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_error(const Vars& vars, std::initializer_list<const char*> fragments) {
  const std::string message = error_of(vars);
  ASSERT_FALSE(message.empty()) << "no error";
  for (const char* f : fragments)
    EXPECT_NE(message.find(f), std::string::npos) << "'" << f << "' not in: " << message;
}

TEST(RankEnv, NoVariablesIsASingleProcessJob) {
  const RankEnv env = read_rank_env(fake({}));
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.local_size, 1);
  EXPECT_EQ(env.source, "none");
  EXPECT_TRUE(env.store_host.empty());
  EXPECT_FALSE(env.store_hosted);
}

TEST(RankEnv, Braid) {
  const RankEnv env = read_rank_env(fake({{"BRAID_RANK", "2"},
                                          {"BRAID_WORLD_SIZE", "4"},
                                          {"BRAID_LOCAL_RANK", "0"},
                                          {"BRAID_LOCAL_WORLD_SIZE", "2"},
                                          {"BRAID_STORE_ADDR", "10.77.0.1:29400"},
                                          {"BRAID_STORE_HOSTED", "1"}}));
  EXPECT_EQ(env.source, "braid");
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.local_size, 2);
  EXPECT_EQ(env.store_host, "10.77.0.1");
  EXPECT_EQ(env.store_port, 29400);
  EXPECT_TRUE(env.store_hosted);
}

TEST(RankEnv, BraidIPv6StoreAddress) {
  const RankEnv env = read_rank_env(
      fake({{"BRAID_RANK", "1"}, {"BRAID_WORLD_SIZE", "2"}, {"BRAID_STORE_ADDR", "[::1]:5000"}}));
  EXPECT_EQ(env.store_host, "::1");
  EXPECT_EQ(env.store_port, 5000);
}

TEST(RankEnv, MissingLocalVariablesMeanOneHost) {
  const RankEnv env = read_rank_env(
      fake({{"BRAID_RANK", "3"}, {"BRAID_WORLD_SIZE", "5"}, {"BRAID_STORE_ADDR", "h:1"}}));
  EXPECT_EQ(env.local_rank, 3);
  EXPECT_EQ(env.local_size, 5);
}

TEST(RankEnv, Torchrun) {
  const RankEnv env = read_rank_env(fake({{"RANK", "5"},
                                          {"WORLD_SIZE", "8"},
                                          {"LOCAL_RANK", "1"},
                                          {"LOCAL_WORLD_SIZE", "4"},
                                          {"MASTER_ADDR", "node0.cluster"},
                                          {"MASTER_PORT", "29500"}}));
  EXPECT_EQ(env.source, "torchrun");
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_size, 4);
  EXPECT_EQ(env.store_host, "node0.cluster");
  EXPECT_EQ(env.store_port, 29500);
  EXPECT_FALSE(env.store_hosted);
}

TEST(RankEnv, BraidStoreAddrWinsOverMaster) {
  const RankEnv env = read_rank_env(fake({{"RANK", "0"},
                                          {"WORLD_SIZE", "2"},
                                          {"MASTER_ADDR", "a"},
                                          {"MASTER_PORT", "1"},
                                          {"BRAID_STORE_ADDR", "b:2"}}));
  EXPECT_EQ(env.store_host, "b");
  EXPECT_EQ(env.store_port, 2);
}

TEST(RankEnv, OpenMpi) {
  const RankEnv env = read_rank_env(fake({{"OMPI_COMM_WORLD_RANK", "3"},
                                          {"OMPI_COMM_WORLD_SIZE", "4"},
                                          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                          {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                          {"MASTER_ADDR", "10.0.0.1"},
                                          {"MASTER_PORT", "7000"}}));
  EXPECT_EQ(env.source, "openmpi");
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_size, 2);
  EXPECT_EQ(env.store_host, "10.0.0.1");
  EXPECT_EQ(env.store_port, 7000);
}

TEST(RankEnv, Pmi) {
  const RankEnv env = read_rank_env(fake({{"PMI_RANK", "1"},
                                          {"PMI_SIZE", "3"},
                                          {"MPI_LOCALRANKID", "1"},
                                          {"MPI_LOCALNRANKS", "3"},
                                          {"BRAID_STORE_ADDR", "127.0.0.1:9"}}));
  EXPECT_EQ(env.source, "pmi");
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.world_size, 3);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_size, 3);
}

TEST(RankEnv, SlurmWithTasksPerNodeList) {
  // 7 tasks: 3 on each of nodes 0 and 1, 1 on node 2; this is node 1's second task.
  const RankEnv env = read_rank_env(fake({{"SLURM_PROCID", "4"},
                                          {"SLURM_NTASKS", "7"},
                                          {"SLURM_LOCALID", "1"},
                                          {"SLURM_NODEID", "1"},
                                          {"SLURM_TASKS_PER_NODE", "3(x2),1"},
                                          {"MASTER_ADDR", "n0"},
                                          {"MASTER_PORT", "29500"}}));
  EXPECT_EQ(env.source, "slurm");
  EXPECT_EQ(env.rank, 4);
  EXPECT_EQ(env.world_size, 7);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_size, 3);
  const RankEnv last = read_rank_env(fake({{"SLURM_PROCID", "6"},
                                           {"SLURM_NTASKS", "7"},
                                           {"SLURM_LOCALID", "0"},
                                           {"SLURM_NODEID", "2"},
                                           {"SLURM_TASKS_PER_NODE", "3(x2),1"},
                                           {"BRAID_STORE_ADDR", "n0:1"}}));
  EXPECT_EQ(last.local_size, 1);
}

TEST(RankEnv, SlurmStepVariablesAndNtasksPerNode) {
  // Inside an allocation of 8 tasks, a step of 4: the step's count is the world.
  RankEnv env = read_rank_env(fake({{"SLURM_PROCID", "2"},
                                    {"SLURM_NTASKS", "8"},
                                    {"SLURM_STEP_NUM_TASKS", "4"},
                                    {"SLURM_LOCALID", "0"},
                                    {"SLURM_NTASKS_PER_NODE", "2"},
                                    {"BRAID_STORE_ADDR", "n0:1"}}));
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_size, 2);
  expect_error({{"SLURM_PROCID", "0"},
                {"SLURM_NTASKS", "2"},
                {"SLURM_NODEID", "0"},
                {"SLURM_TASKS_PER_NODE", "2(x"},
                {"BRAID_STORE_ADDR", "n0:1"}},
               {"SLURM_TASKS_PER_NODE", "2(x", "2(x3),1"});
  expect_error({{"SLURM_PROCID", "0"},
                {"SLURM_NTASKS", "2"},
                {"SLURM_NODEID", "5"},
                {"SLURM_TASKS_PER_NODE", "1(x2)"},
                {"BRAID_STORE_ADDR", "n0:1"}},
               {"SLURM_NODEID=5", "lists only 2 nodes"});
}

TEST(RankEnv, PrecedenceBraidTorchrunOpenMpiPmiSlurm) {
  Vars all = {{"BRAID_RANK", "0"},
              {"BRAID_WORLD_SIZE", "2"},
              {"RANK", "1"},
              {"WORLD_SIZE", "3"},
              {"OMPI_COMM_WORLD_RANK", "2"},
              {"OMPI_COMM_WORLD_SIZE", "4"},
              {"PMI_RANK", "3"},
              {"PMI_SIZE", "5"},
              {"SLURM_PROCID", "4"},
              {"SLURM_NTASKS", "6"},
              {"BRAID_STORE_ADDR", "h:1"}};
  const char* order[][3] = {{"braid", "BRAID_RANK", "BRAID_WORLD_SIZE"},
                            {"torchrun", "RANK", "WORLD_SIZE"},
                            {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                            {"pmi", "PMI_RANK", "PMI_SIZE"},
                            {"slurm", "SLURM_PROCID", "SLURM_NTASKS"}};
  for (int i = 0; i < 5; ++i) {
    const RankEnv env = read_rank_env(fake(all));
    EXPECT_EQ(env.source, order[i][0]);
    EXPECT_EQ(env.rank, i);
    EXPECT_EQ(env.world_size, i + 2);
    all.erase(order[i][1]);
    all.erase(order[i][2]);
  }
  EXPECT_EQ(read_rank_env(fake(all)).source, "none");
}

TEST(RankEnv, EmptyValuesCountAsUnset) {
  EXPECT_EQ(read_rank_env(fake({{"RANK", ""}, {"WORLD_SIZE", ""}})).source, "none");
}

TEST(RankEnv, WorldSizeOneNeedsNoStore) {
  const RankEnv env = read_rank_env(fake({{"RANK", "0"}, {"WORLD_SIZE", "1"}}));
  EXPECT_EQ(env.source, "torchrun");
  EXPECT_TRUE(env.store_host.empty());
}

TEST(RankEnv, RankOutOfRange) {
  expect_error({{"BRAID_RANK", "4"}, {"BRAID_WORLD_SIZE", "4"}, {"BRAID_STORE_ADDR", "h:1"}},
               {"BRAID_RANK=4", "BRAID_WORLD_SIZE=4", "[0, 4)"});
  expect_error({{"RANK", "-1"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
               {"RANK='-1'", "integer >= 0"});
}

TEST(RankEnv, MalformedIntegers) {
  expect_error({{"RANK", "one"}, {"WORLD_SIZE", "2"}}, {"RANK='one'", "rank"});
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2x"}}, {"WORLD_SIZE='2x'", "number of ranks"});
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "0"}}, {"WORLD_SIZE='0'", "integer >= 1"});
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "99999999999"}}, {"WORLD_SIZE='99999999999'"});
  expect_error({{"RANK", " 1"}, {"WORLD_SIZE", "2"}}, {"RANK=' 1'"});
}

TEST(RankEnv, HalfAConvention) {
  expect_error({{"RANK", "0"}}, {"RANK is set but WORLD_SIZE is not", "torchrun"});
  expect_error({{"OMPI_COMM_WORLD_SIZE", "2"}},
               {"OMPI_COMM_WORLD_SIZE is set but OMPI_COMM_WORLD_RANK is not"});
}

TEST(RankEnv, LocalRankAndSizeInconsistent) {
  expect_error({{"RANK", "1"},
                {"WORLD_SIZE", "4"},
                {"LOCAL_RANK", "2"},
                {"LOCAL_WORLD_SIZE", "2"},
                {"MASTER_ADDR", "h"},
                {"MASTER_PORT", "1"}},
               {"LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2", "[0, 2)"});
  expect_error({{"RANK", "1"},
                {"WORLD_SIZE", "4"},
                {"LOCAL_RANK", "0"},
                {"LOCAL_WORLD_SIZE", "8"},
                {"MASTER_ADDR", "h"},
                {"MASTER_PORT", "1"}},
               {"LOCAL_WORLD_SIZE=8", "exceeds WORLD_SIZE=4"});
}

TEST(RankEnv, MultiRankJobNeedsAStore) {
  expect_error({{"BRAID_RANK", "0"}, {"BRAID_WORLD_SIZE", "2"}},
               {"BRAID_STORE_ADDR", "2 ranks", "braid launch"});
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}},
               {"BRAID_STORE_ADDR", "MASTER_ADDR and MASTER_PORT"});
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}},
               {"MASTER_ADDR is set but MASTER_PORT is not"});
}

TEST(RankEnv, MalformedStoreAddresses) {
  for (const char* bad :
       {"nohost", "h:", ":1", "h:0", "h:65536", "h:port", "[::1]", "[::1]5", "a:b:1"})
    expect_error({{"BRAID_RANK", "0"}, {"BRAID_WORLD_SIZE", "2"}, {"BRAID_STORE_ADDR", bad}},
                 {"BRAID_STORE_ADDR", "host:port"});
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}},
               {"MASTER_PORT", "70000", "[1, 65535]"});
}

TEST(RankEnv, StoreHostedMustBeZeroOrOne) {
  EXPECT_FALSE(read_rank_env(fake({{"BRAID_STORE_HOSTED", "0"}})).store_hosted);
  expect_error({{"BRAID_STORE_HOSTED", "yes"}}, {"BRAID_STORE_HOSTED='yes'", "expected 1"});
}

TEST(Timeout, DefaultAndSeconds) {
  EXPECT_EQ(read_timeout(fake({})), comm::kDefaultTimeout);
  EXPECT_EQ(read_timeout(fake({{"BRAID_TIMEOUT_S", "3"}})), std::chrono::milliseconds(3000));
  EXPECT_EQ(read_timeout(fake({{"BRAID_TIMEOUT_S", "0.25"}})), std::chrono::milliseconds(250));
  for (const char* bad : {"0", "-1", "abc", "3s", "inf", "nan", "1e9"}) {
    try {
      read_timeout(fake({{"BRAID_TIMEOUT_S", bad}}));
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("BRAID_TIMEOUT_S"), std::string::npos) << e.what();
    }
  }
}

// The job id keeps jobs on one store apart: braid's own first, then the innermost
// launcher's (torchrun, then MPI, then Slurm), escaped so it never holds a '/'.
TEST(JobId, Precedence) {
  EXPECT_FALSE(read_job_id(fake({})).has_value());
  const Vars all = {{"BRAID_JOB_ID", "mine"},
                    {"TORCHELASTIC_RUN_ID", "tr"},
                    {"TORCHELASTIC_RESTART_COUNT", "2"},
                    {"PMIX_NAMESPACE", "prterun-h-1@1"},
                    {"SLURM_JOB_ID", "77"},
                    {"SLURM_STEP_ID", "3"}};
  EXPECT_EQ(read_job_id(fake(all))->id, "mine");
  Vars v = all;
  v.erase("BRAID_JOB_ID");
  EXPECT_EQ(read_job_id(fake(v))->id, "torchelastic-tr-restart2");
  v.erase("TORCHELASTIC_RUN_ID");
  EXPECT_EQ(read_job_id(fake(v))->id, "ompi-prterun-h-1@1");
  EXPECT_EQ(read_job_id(fake(v))->source, "PMIX_NAMESPACE");
  v.erase("PMIX_NAMESPACE");
  EXPECT_EQ(read_job_id(fake(v))->id, "slurm-77.3");
  v.erase("SLURM_STEP_ID");
  EXPECT_EQ(read_job_id(fake(v))->id, "slurm-77");
  EXPECT_EQ(read_job_id(fake({{"OMPI_MCA_orte_ess_jobid", "123"}}))->id, "ompi-123");
}

TEST(JobId, TorchrunsDefaultRunIdNamesNoJob) {
  EXPECT_FALSE(read_job_id(fake({{"TORCHELASTIC_RUN_ID", "none"}})).has_value());
  EXPECT_EQ(read_job_id(fake({{"TORCHELASTIC_RUN_ID", "none"}, {"SLURM_JOB_ID", "5"}}))->id,
            "slurm-5");
  EXPECT_EQ(read_job_id(fake({{"TORCHELASTIC_RUN_ID", "abc"}}))->id, "torchelastic-abc-restart0");
}

TEST(JobId, EscapedSoDistinctIdsStayDistinct) {
  EXPECT_EQ(escape_job_id("a/b c"), "a%2Fb%20c");
  EXPECT_EQ(escape_job_id("a%2Fb"), "a%252Fb");
  EXPECT_EQ(escape_job_id("Job_1.2:x@y+z-w"), "Job_1.2:x@y+z-w");
  EXPECT_THROW(read_job_id(fake({{"BRAID_JOB_ID", std::string(300, 'x')}})), Error);
}

TEST(JobId, ReadWithTheRankEnvironment) {
  const RankEnv env = read_rank_env(fake({{"RANK", "1"},
                                          {"WORLD_SIZE", "2"},
                                          {"MASTER_ADDR", "h"},
                                          {"MASTER_PORT", "1"},
                                          {"BRAID_JOB_ID", "j/1"}}));
  EXPECT_EQ(env.job_id, "j%2F1");
  EXPECT_EQ(env.job_id_source, "BRAID_JOB_ID");
}

// BRAID_BACKEND picks MPI instead of braid's store and transports; a bad value or an MPI
// request in a build without MPI is an error that says what to do.
TEST(JoinJob, BackendVariable) {
  auto join_error = [](const Vars& vars) -> std::string {
    try {
      JoinOptions o;
      o.getenv = fake(vars);
      join_job(o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(join_error({{"BRAID_BACKEND", "nccl"}}).find("expected braid, mpi or mpi-p2p"),
            std::string::npos);
#ifndef BRAID_HAVE_MPI
  EXPECT_NE(join_error({{"BRAID_BACKEND", "mpi"}}).find("-DBRAID_MPI=ON"), std::string::npos);
#endif
  JoinOptions o;
  o.getenv = fake({{"BRAID_BACKEND", "braid"}});
  const Job job = join_job(o);
  EXPECT_EQ(job.world->size(), 1);
}

}  // namespace
}  // namespace braid::launch
