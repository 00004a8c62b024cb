// One long-lived `braid store` serving many jobs: two consecutive jobs and then two
// concurrent ones, two ranks each, every rank a real `braid comm-check` process, over shm
// and tcp. Jobs are told apart by their id (BRAID_JOB_ID, or a scheduler's such as
// SLURM_JOB_ID); without the per-job key prefix a later job reads an earlier one's
// addresses and shm names and fails or hangs. A shared store without a job id, and a job
// id used twice, are refused by name.
#include <sys/stat.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "launch/braid_process.h"
#include "temp_dir.h"

namespace braid::testing {
namespace {

constexpr const char* kSecret = "8f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";

class SharedStore : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    secret_file_ = dir_.file("secret");
    {
      std::ofstream out(secret_file_);
      out << kSecret << "\n";
    }
    ::chmod(secret_file_.c_str(), 0600);
    store_ = std::make_unique<Process>(std::vector<std::string>{BRAID_BINARY, "store", "--host",
                                                                "127.0.0.1", "--port", "0",
                                                                "--secret-file", secret_file_});
    // Its first stdout line names the port it got ("braid store listening on H:P").
    const std::string marker = "listening on ";
    ASSERT_TRUE(store_->wait_for(marker)) << store_->output();
    while (store_->output().find('\n', store_->output().find(marker)) == std::string::npos)
      ASSERT_TRUE(store_->wait_for("\n", Process::occurrences(store_->output(), "\n") + 1))
          << store_->output();
    address_ = store_->output().substr(store_->output().find(marker) + marker.size());
    address_ = address_.substr(0, address_.find('\n'));
  }
  void TearDown() override {
    if (store_) {
      ::kill(store_->pid(), SIGTERM);
      EXPECT_EQ(store_->finish(), 0) << store_->output();
    }
  }

  // Starts `ranks` ranks of one job against the shared store; `job_vars` name the job.
  std::vector<std::unique_ptr<Process>> start_job(
      int ranks, const std::map<std::string, std::string>& job_vars,
      const std::vector<std::string>& extra = {}) {
    std::vector<std::unique_ptr<Process>> job;
    for (int r = 0; r < ranks; ++r) {
      std::map<std::string, std::string> vars = job_vars;
      vars["BRAID_RANK"] = std::to_string(r);
      vars["BRAID_WORLD_SIZE"] = std::to_string(ranks);
      vars["BRAID_STORE_ADDR"] = address_;
      vars["BRAID_STORE_HOSTED"] = "1";
      vars["BRAID_SECRET"] = kSecret;
      vars["BRAID_TIMEOUT_S"] = "20";
      std::vector<std::string> args = {BRAID_BINARY, "comm-check", "--transport", GetParam(),
                                       "--elements", "0",          "1000",        "65536"};
      args.insert(args.end(), extra.begin(), extra.end());
      job.push_back(std::make_unique<Process>(args, vars));
    }
    return job;
  }

  void expect_job_ok(std::vector<std::unique_ptr<Process>>& job, const std::string& what) {
    const int n = static_cast<int>(job.size());
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(job[r]->finish(), 0) << what << ", rank " << r << ":\n" << job[r]->output();
      const std::string ok =
          "rank " + std::to_string(r) + "/" + std::to_string(n) + " ok: transport " + GetParam();
      EXPECT_TRUE(contains(job[r]->output(), ok)) << what << ":\n" << job[r]->output();
    }
  }

  TempDir dir_;
  std::string secret_file_, address_;
  std::unique_ptr<Process> store_;
};

TEST_P(SharedStore, ConsecutiveJobsEachWithTheirOwnId) {
  for (int j = 0; j < 3; ++j) {
    auto job = start_job(2, {{"BRAID_JOB_ID", "consecutive-" + std::to_string(j)}});
    expect_job_ok(job, "job " + std::to_string(j));
  }
}

TEST_P(SharedStore, ConcurrentJobs) {
  auto a = start_job(2, {{"BRAID_JOB_ID", "concurrent-a"}});
  auto b = start_job(2, {{"BRAID_JOB_ID", "concurrent-b"}});
  expect_job_ok(a, "job a");
  expect_job_ok(b, "job b");
}

TEST_P(SharedStore, SlurmJobAndStepNameTheJob) {
  // Two srun steps of one allocation are two jobs.
  for (const char* step : {"0", "1"}) {
    auto job = start_job(2, {{"SLURM_JOB_ID", "4242"}, {"SLURM_STEP_ID", step}});
    expect_job_ok(job, std::string("step ") + step);
  }
}

TEST_P(SharedStore, NoJobIdIsRefusedByName) {
  auto job = start_job(2, {});
  for (auto& rank : job) {
    EXPECT_EQ(rank->finish(), 1) << rank->output();
    EXPECT_TRUE(contains(rank->output(), "BRAID_JOB_ID")) << rank->output();
    EXPECT_TRUE(contains(rank->output(), "is shared")) << rank->output();
  }
}

TEST_P(SharedStore, AJobIdUsedTwiceIsRefusedByName) {
  auto first = start_job(2, {{"BRAID_JOB_ID", "twice"}});
  expect_job_ok(first, "first job");
  auto again = start_job(2, {{"BRAID_JOB_ID", "twice"}});
  for (auto& rank : again) {
    EXPECT_EQ(rank->finish(), 1) << rank->output();
    EXPECT_TRUE(contains(rank->output(), "job id 'twice' (from BRAID_JOB_ID) was already used"))
        << rank->output();
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, SharedStore, ::testing::Values("shm", "tcp"));

// Without --secret-file, `braid store` reads the secret as ranks do (launch/secret_env.h):
// BRAID_SECRET_FILE here; with neither, it refuses to start and says what to set.
TEST(StoreSecret, FromTheEnvironmentOrARefusalThatSaysWhatToSet) {
  const TempDir dir;
  const std::string file = dir.file("secret");
  std::ofstream(file) << kSecret << "\n";
  ::chmod(file.c_str(), 0600);
  Process store({BRAID_BINARY, "store", "--host", "127.0.0.1", "--port", "0"},
                {{"BRAID_SECRET_FILE", file}});
  ASSERT_TRUE(store.wait_for("listening on ")) << store.output();
  // Killed, not stopped: SharedStore's TearDown tests the SIGTERM path; this test is about
  // the secret, and an early SIGTERM under ThreadSanitizer (which defers handlers) was
  // what hung it in CI three times.
  ::kill(store.pid(), SIGKILL);
  EXPECT_EQ(store.finish(), 128 + SIGKILL) << store.output();

  Process refused({BRAID_BINARY, "store", "--host", "127.0.0.1", "--port", "0"});
  EXPECT_NE(refused.finish(), 0) << refused.output();
  EXPECT_TRUE(contains(refused.output(), "no secret")) << refused.output();
  EXPECT_TRUE(contains(refused.output(), "BRAID_SECRET_FILE")) << refused.output();
}

}  // namespace
}  // namespace braid::testing
