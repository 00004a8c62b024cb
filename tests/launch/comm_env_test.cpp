// The comm settings launch/ reads from the environment and passes in (comm/ reads none):
// read_transport_options and read_algorithm_table over a fake environment, then join_job
// showing each value reaching its component: the advertised tcp address in the store, the
// shm idle policy in the transport's options, the selection table in the world group and
// its sub-groups, and the secret.
#include "launch/comm_env.h"

#include <gtest/gtest.h>

#include <exception>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "comm/collectives.h"
#include "comm/store_server.h"
#include "core/error.h"
#include "fake_env.h"
#include "launch/job.h"
#include "temp_dir.h"

namespace braid::launch {
namespace {

using namespace std::chrono_literals;
using testing::fake;
using testing::Vars;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

const std::string kSecret = "000102030405060708090a0b0c0d0e0f";

// A table that picks `algorithm` for every allreduce.
std::string write_table(const testing::TempDir& dir, comm::Algorithm algorithm) {
  const std::string path = dir.file(std::string(comm::algorithm_name(algorithm)) + ".json");
  std::ofstream(path) << comm::SelectionTable(
                             {comm::SelectionRule{comm::CallKind::allreduce, 1, 1 << 30, 0,
                                                  SIZE_MAX, algorithm}})
                             .to_json();
  return path;
}

TEST(ReadTransportOptions, FillsWhatTheCallerLeftUnset) {
  const Vars vars = {
      {"BRAID_IFACE_ADDR", "10.0.0.7"}, {"BRAID_SHM_SPIN_US", "7"}, {"BRAID_SHM_YIELD_US", "70"}};
  const comm::TransportOptions o = read_transport_options(fake(vars));
  EXPECT_EQ(o.advertise_host, "10.0.0.7");
  EXPECT_EQ(o.shm_spin, 7us);
  EXPECT_EQ(o.shm_yield, 70us);

  comm::TransportOptions given;
  given.advertise_host = "10.0.0.1";
  given.shm_spin = 0us;
  const comm::TransportOptions mixed = read_transport_options(fake(vars), given);
  EXPECT_EQ(mixed.advertise_host, "10.0.0.1");
  EXPECT_EQ(mixed.shm_spin, 0us);
  EXPECT_EQ(mixed.shm_yield, 70us);

  const comm::TransportOptions none = read_transport_options(
      fake({{"BRAID_IFACE_ADDR", ""}, {"BRAID_SHM_SPIN_US", ""}}));  // empty counts as unset
  EXPECT_TRUE(none.advertise_host.empty());
  EXPECT_FALSE(none.shm_spin);
  EXPECT_FALSE(none.shm_yield);
}

TEST(ReadTransportOptions, BadMicrosecondsNameTheVariableAndTheValue) {
  for (const char* bad : {"abc", "-1", "5us", "1.5", "99999999"}) {
    try {
      read_transport_options(fake({{"BRAID_SHM_YIELD_US", bad}}));
      ADD_FAILURE() << "BRAID_SHM_YIELD_US='" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), std::string("BRAID_SHM_YIELD_US='") + bad + "'")) << e.what();
      EXPECT_TRUE(contains(e.what(), "microseconds")) << e.what();
    }
  }
}

TEST(ReadAlgorithmTable, UnsetIsTheBuiltInTableAndErrorsNameTheVariableAndTheFile) {
  EXPECT_EQ(read_algorithm_table(fake({})), nullptr);
  EXPECT_EQ(read_algorithm_table(fake({{"BRAID_ALGORITHM_TABLE", ""}})), nullptr);
  const testing::TempDir dir;
  const auto table = read_algorithm_table(
      fake({{"BRAID_ALGORITHM_TABLE", write_table(dir, comm::Algorithm::tree)}}));
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(table->choose(comm::CallKind::allreduce, 2, 1), comm::Algorithm::tree);

  const std::string missing = dir.file("missing.json");
  try {
    read_algorithm_table(fake({{"BRAID_ALGORITHM_TABLE", missing}}));
    ADD_FAILURE() << "a missing table was accepted";
  } catch (const IoError& e) {
    EXPECT_TRUE(contains(e.what(), "BRAID_ALGORITHM_TABLE: ")) << e.what();
    EXPECT_TRUE(contains(e.what(), missing)) << e.what();
    EXPECT_TRUE(contains(e.what(), "unset BRAID_ALGORITHM_TABLE")) << e.what();
  }
  const std::string bad = dir.file("bad.json");
  std::ofstream(bad) << "{";
  try {
    read_algorithm_table(fake({{"BRAID_ALGORITHM_TABLE", bad}}));
    ADD_FAILURE() << "a table that is not JSON was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "BRAID_ALGORITHM_TABLE: " + bad)) << e.what();
  }
}

TEST(JoinJob, TheAlgorithmTableReachesTheWorldGroupAndItsSubGroups) {
  const testing::TempDir dir;
  const Job job = [&] {
    JoinOptions o;
    o.getenv = fake({{"BRAID_ALGORITHM_TABLE", write_table(dir, comm::Algorithm::tree)}});
    return join_job(o);
  }();
  EXPECT_EQ(job.world->algorithm_table().choose(comm::CallKind::allreduce, 8, 1 << 20),
            comm::Algorithm::tree);
  const auto sub = job.world->split(0, 0);
  EXPECT_EQ(&sub->algorithm_table(), &job.world->algorithm_table());

  // A table given in the options wins over the variable; none at all is the built-in one.
  JoinOptions given;
  given.getenv = fake({{"BRAID_ALGORITHM_TABLE", write_table(dir, comm::Algorithm::tree)}});
  given.algorithm_table =
      std::make_shared<const comm::SelectionTable>(comm::SelectionTable::builtin());
  EXPECT_EQ(join_job(given).world->algorithm_table().choose(comm::CallKind::allreduce, 8, 1 << 20),
            comm::SelectionTable::builtin().choose(comm::CallKind::allreduce, 8, 1 << 20));
  JoinOptions plain;
  plain.getenv = fake({});
  EXPECT_EQ(&join_job(plain).world->algorithm_table(), &comm::SelectionTable::builtin());
}

// Two ranks as threads joining one tcp job through a hosted store, each through its own
// fake environment: nothing they read comes from the process's real environment.
TEST(JoinJob, EnvironmentValuesReachTheTransportAndTheGroup) {
  comm::StoreServerOptions server_options;
  server_options.secret = comm::Secret::from_hex(kSecret);
  comm::StoreServer server(server_options);
  const testing::TempDir dir;
  const std::string table = write_table(dir, comm::Algorithm::tree);

  std::vector<Job> jobs(2);
  std::vector<std::exception_ptr> errors(2);
  std::vector<std::string> advertised(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      Vars vars = {{"BRAID_RANK", std::to_string(r)},
                   {"BRAID_WORLD_SIZE", "2"},
                   {"BRAID_STORE_ADDR", "127.0.0.1:" + std::to_string(server.port())},
                   {"BRAID_STORE_HOSTED", "1"},
                   {"BRAID_JOB_ID", "comm-env-test"},
                   {"BRAID_TIMEOUT_S", "60"},
                   {"BRAID_TRANSPORT", "tcp"},
                   {"BRAID_SECRET", kSecret},
                   {"BRAID_SHM_SPIN_US", std::to_string(10 + r)},
                   {"BRAID_SHM_YIELD_US", "300"},
                   {"BRAID_ALGORITHM_TABLE", table}};
      // 127.0.0.2 is on the loopback interface too, but no route to the store leaves from it.
      if (r == 1) vars["BRAID_IFACE_ADDR"] = "127.0.0.2";
      try {
        JoinOptions o;
        o.getenv = fake(vars);
        Job& job = jobs[static_cast<size_t>(r)];
        job = join_job(o);
        advertised[static_cast<size_t>(r)] = job.store->get_string(
            "transport/0/tcp/addr/" + std::to_string(r), comm::Deadline::after(10s));
        float x = static_cast<float>(r + 1);
        comm::allreduce(*job.world, &x, 1, DType::f32, ReduceOp::sum);
        EXPECT_EQ(x, 3.0f);
        comm::barrier(*job.world);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);

  EXPECT_EQ(advertised[0].rfind("127.0.0.1:", 0), 0u) << advertised[0];  // the route to the store
  EXPECT_EQ(advertised[1].rfind("127.0.0.2:", 0), 0u) << advertised[1];  // BRAID_IFACE_ADDR
  // tcp listens where it advertises (the store is on loopback, as under braid launch), not
  // on every interface; an address given by hand keeps every interface.
  EXPECT_EQ(jobs[0].transport_options.listen_host, "127.0.0.1");
  EXPECT_EQ(jobs[1].transport_options.listen_host, "0.0.0.0");
  for (int r = 0; r < 2; ++r) {
    const Job& job = jobs[static_cast<size_t>(r)];
    EXPECT_EQ(job.transport_options.shm_spin, std::chrono::microseconds(10 + r));
    EXPECT_EQ(job.transport_options.shm_yield, 300us);
    EXPECT_EQ(job.transport_options.route_probe_host, "127.0.0.1");
    EXPECT_EQ(job.secret.hex(), kSecret);
    EXPECT_EQ(job.world->algorithm_table().choose(comm::CallKind::allreduce, 2, 4),
              comm::Algorithm::tree);
  }
}

}  // namespace
}  // namespace braid::launch
