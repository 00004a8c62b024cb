// Launch by convention (issue 16, point 9): the same braid binary and flags run two-rank
// data-parallel training under torchrun, under Open MPI's mpirun and under a real Slurm's
// srun (slurmctld and slurmd on this host, scripts/slurm-local.sh), each reading only its
// launcher's variables. Rank 0 alone prints and writes, and the weights are bitwise those
// of the run under `braid launch -n 2` (ddp_train_run.h says why they must be). A test
// whose launcher is not installed, or that needs root, says "skipped: why".
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "braid_process.h"
#include "ddp_train_run.h"
#include "fashion_mnist_data.h"
#include "temp_dir.h"

namespace {

using braid::testing::Process;
using braid::testing::RankTags;
using braid::testing::TempDir;

// Ranks that hang past BRAID_TIMEOUT_S fail by themselves; this bounds the launcher too.
std::vector<std::string> bounded(const std::vector<std::string>& launcher_args) {
  std::vector<std::string> args = {"/usr/bin/timeout", "-k", "10", "240"};
  args.insert(args.end(), launcher_args.begin(), launcher_args.end());
  return args;
}

// `launcher...` followed by the training command, its code and output checked as every
// two-rank run must be (ddp_train_run.h).
void run_and_check(const TempDir& tmp, std::vector<std::string> launcher,
                   const std::map<std::string, std::string>& vars, const RankTags& tags) {
  const std::string out = tmp.file("out");
  for (const std::string& a :
       braid::testing::ddp_train_command(braid::testing::write_tiny_mlp(tmp), out))
    launcher.push_back(a);
  Process run(bounded(launcher), vars);
  const int code = run.finish();
  ASSERT_EQ(code, 0) << run.output();
  braid::testing::expect_rank_zero_alone_printed(run.output(), tags);
  braid::testing::expect_one_writer_and_reference_weights(out);
}

TEST(TrainConventions, BraidLaunchIsTheReference) {
  REQUIRE_FASHION_MNIST();
  const braid::testing::ReferenceRun& ref = braid::testing::reference_run();
  ASSERT_EQ(ref.code, 0) << ref.output;
  braid::testing::expect_rank_zero_alone_printed(ref.output, {"[rank 0] ", "[rank 1] "});
}

// torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR (this host's
// name) and MASTER_PORT; rank 0 hosts braid's store there. Debian 12's torchrun (PyTorch
// 1.13) knows only the underscore spellings of its flags, and on Python 3.11 fails on its
// own defaults `--redirects 0 --tee 0` (IntFlag no longer lists 0), so the test passes
// `--redirects 1 --tee 1`: each rank's stdout copied to the console as "[default<rank>]:".
// The rendezvous is --standalone's, on a free port instead of its fixed 29400.
TEST(TrainConventions, TorchrunRunsDdpAndOnlyRankZeroWrites) {
  REQUIRE_FASHION_MNIST();
  const std::string torchrun = braid::testing::find_on_path("torchrun");
  if (torchrun.empty())
    GTEST_SKIP() << "skipped: torchrun is not installed (Debian's python3-torch has it)";
  const TempDir tmp;
  run_and_check(
      tmp,
      {torchrun, "--no_python", "--nnodes", "1", "--nproc_per_node", "2", "--rdzv_backend", "c10d",
       "--rdzv_endpoint", "127.0.0.1:" + std::to_string(braid::testing::free_port()), "--rdzv_id",
       "braid-test", "--redirects", "1", "--tee", "1"},
      braid::testing::job_vars(), {"[default0]:", "[default1]:"});
}

// Open MPI sets OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE but no address for
// braid's store, so the user names one with BRAID_STORE_ADDR (rank 0 hosts it there).
TEST(TrainConventions, MpirunRunsDdpAndOnlyRankZeroWrites) {
  REQUIRE_FASHION_MNIST();
  const std::string mpirun = braid::testing::find_on_path("mpirun");
  if (mpirun.empty())
    GTEST_SKIP() << "skipped: mpirun is not installed (Debian's openmpi-bin; scripts/setup.sh "
                    "installs it)";
  const TempDir tmp;
  auto vars = braid::testing::job_vars();
  vars["BRAID_STORE_ADDR"] = "127.0.0.1:" + std::to_string(braid::testing::free_port());
  run_and_check(tmp,
                {mpirun, "-n", "2", "--allow-run-as-root", "--oversubscribe", "--tag-output", "-x",
                 "BRAID_STORE_ADDR", "-x", "BRAID_SECRET", "-x", "BRAID_TIMEOUT_S"},
                vars, {",0]<stdout>:", ",1]<stdout>:"});
}

// A Slurm of one node on this host for the test's lifetime (scripts/slurm-local.sh), on
// ports nobody uses now, its files in `dir`.
class LocalSlurm {
 public:
  explicit LocalSlurm(const std::string& dir) {
    int port = 0;
    // slurmctld's port and the next one (slurmd's) must both be free.
    for (int tries = 0; tries < 20 && port == 0; ++tries) {
      const int p = braid::testing::free_port();
      if (p < 65535 && port_is_free(p + 1)) port = p;
    }
    vars_ = {{"BRAID_SLURM_DIR", dir}, {"BRAID_SLURM_PORT", std::to_string(port)}};
    Process up({script(), "up"}, vars_);
    up_code_ = up.finish();
    up_output_ = up.output();
  }
  ~LocalSlurm() { Process({script(), "down"}, vars_).finish(); }
  LocalSlurm(const LocalSlurm&) = delete;
  LocalSlurm& operator=(const LocalSlurm&) = delete;

  int up_code() const { return up_code_; }
  const std::string& up_output() const { return up_output_; }
  std::string conf() const { return vars_.at("BRAID_SLURM_DIR") + "/slurm.conf"; }

 private:
  static std::string script() { return std::string(BRAID_SOURCE_DIR) + "/scripts/slurm-local.sh"; }
  static bool port_is_free(int port) {
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    const bool free = ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(s);
    return free;
  }
  std::map<std::string, std::string> vars_;
  int up_code_ = -1;
  std::string up_output_;
};

// Slurm sets SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID, SLURM_STEP_TASKS_PER_NODE
// and SLURM_JOB_ID.SLURM_STEP_ID (the job's id) but no store address: BRAID_STORE_ADDR,
// which srun passes on with the rest of the environment.
TEST(TrainConventions, SrunRunsDdpAndOnlyRankZeroWrites) {
  REQUIRE_FASHION_MNIST();
  if (::geteuid() != 0)
    GTEST_SKIP() << "skipped: a local Slurm needs root (slurmd starts every job's tasks)";
  const std::string srun = braid::testing::find_on_path("srun");
  if (srun.empty() || braid::testing::find_on_path("slurmctld").empty() ||
      braid::testing::find_on_path("slurmd").empty())
    GTEST_SKIP() << "skipped: Slurm is not installed (apt-get install slurm-wlm; "
                    "scripts/setup.sh --test-packages does)";
  const TempDir tmp;
  const LocalSlurm slurm(tmp.file("slurm"));
  ASSERT_EQ(slurm.up_code(), 0) << slurm.up_output();
  auto vars = braid::testing::job_vars();
  vars["SLURM_CONF"] = slurm.conf();
  vars["BRAID_STORE_ADDR"] = "127.0.0.1:" + std::to_string(braid::testing::free_port());
  run_and_check(tmp, {srun, "-n", "2", "--label"}, vars, {"\n0: ", "\n1: "});
}

}  // namespace
