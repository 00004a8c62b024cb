// Shared memory never outlives a job, whatever kills it: ranks are real processes killed
// with SIGKILL in the middle of setting up the shm transport and of allocate_shared(),
// and a normal job is checked while it runs. What each rank maps is read from its
// /proc/<pid>/maps, so the checks concern only this test's segments, not those of other
// jobs on the machine.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "comm/collectives.h"
#include "comm/group.h"
#include "comm/shared_buffer.h"
#include "comm/shm_ring.h"
#include "comm/shm_transport.h"
#include "transport_test_util.h"

namespace braid::comm {
namespace {

using namespace std::chrono_literals;
using testing::soon;
using testing::test_secret;

// Every rank of a job is a forked process (ForkedRanks from rank 0), so the test can read
// each one's mappings and kill any of them.
using testing::ForkedRanks;

// The files a process maps whose name says braid: /dev/shm/braid-... or memfd:braid-...
std::set<std::string> braid_mappings(pid_t pid) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::set<std::string> out;
  std::string line;
  while (std::getline(maps, line)) {
    const size_t at = line.find('/');
    const size_t memfd = line.find("memfd:braid");
    if (memfd != std::string::npos)
      out.insert(line.substr(memfd));
    else if (at != std::string::npos && line.find("braid-", at) != std::string::npos)
      out.insert(line.substr(at));
  }
  return out;
}

// Waits until process `pid` maps something whose name contains `what`.
std::set<std::string> wait_for_mapping(pid_t pid, const std::string& what) {
  const Deadline deadline = Deadline::after(30s);
  for (;;) {
    const auto m = braid_mappings(pid);
    for (const auto& name : m)
      if (name.find(what) != std::string::npos) return m;
    if (deadline.expired()) {
      ADD_FAILURE() << "process " << pid << " never mapped a " << what << " segment";
      return m;
    }
    std::this_thread::sleep_for(5ms);
  }
}

// The names among `mappings` that still exist in /dev/shm.
std::vector<std::string> left_in_dev_shm(const std::set<std::string>& mappings) {
  std::vector<std::string> left;
  for (std::string name : mappings) {
    if (name.rfind("/dev/shm/", 0) != 0) continue;
    if (const size_t d = name.find(" (deleted)"); d != std::string::npos) name.resize(d);
    if (std::filesystem::exists(name)) left.push_back(name);
  }
  return left;
}

TransportOptions small_rings() {
  TransportOptions o;
  o.shm_ring_bytes = 64 << 10;
  return o;
}

TEST(ShmLeak, RanksKilledDuringTransportSetupLeaveNothingInDevShm) {
  // Two of three ranks start; the third never comes, so both stay in setup with their
  // segments made and not yet mapped by everyone, until they are killed.
  ForkedRanks job(
      2, [](int r, Store& store) { connect_shm_transport(store, r, 3, soon(), small_rings()); }, 0);
  // Rank 2 got as far as saying where it runs (pid, pid namespace, boot id): this process.
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  std::getline(boot, boot_id);
  job.store().set("shm/host/2", std::to_string(::getpid()) + " " +
                                    std::to_string(shm::pid_namespace()) + " " + boot_id);
  const auto rank0 = wait_for_mapping(job.pid(0), "braid-");
  const auto rank1 = wait_for_mapping(job.pid(1), "braid-");
  job.kill_all();
  EXPECT_EQ(left_in_dev_shm(rank0), std::vector<std::string>{});
  EXPECT_EQ(left_in_dev_shm(rank1), std::vector<std::string>{});
}

TEST(ShmLeak, ARankKilledInsideAllocateSharedLeavesNothingInDevShm) {
  // Rank 0 allocates a shared buffer; rank 1 never joins the call, so rank 0 waits with its
  // segments made until both are killed.
  ForkedRanks job(
      2,
      [](int r, Store& store) {
        auto group = Group::world(connect_shm_transport(store, r, 2, soon(), small_rings()));
        if (r == 0) allocate_shared(*group, 1 << 20);
        std::this_thread::sleep_for(60s);
      },
      0);
  const auto rank0 = wait_for_mapping(job.pid(0), "braid-buf");
  job.kill_all();
  EXPECT_EQ(left_in_dev_shm(rank0), std::vector<std::string>{});
}

TEST(ShmLeak, ARunningJobHasNoNameInDevShmOnceSetUp) {
  int ready[2], go[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(go), 0);
  ForkedRanks job(
      2,
      [&](int r, Store& store) {
        ::close(ready[0]);
        ::close(go[1]);
        auto group = Group::world(connect_shm_transport(store, r, 2, soon(), small_rings()));
        SharedBuffer buffer = allocate_shared(*group, 1 << 20);
        if (!buffer.shared()) throw std::runtime_error("the buffer is not shared");
        buffer.as<float>()[0] = static_cast<float>(r + 1);
        allreduce(*group, buffer.data(), 1, DType::f32, ReduceOp::sum);
        if (buffer.as<float>()[0] != 3.0f) throw std::runtime_error("wrong sum");
        const char one = 1;
        if (::write(ready[1], &one, 1) != 1) throw std::runtime_error("cannot report");
        char c = 0;
        if (::read(go[0], &c, 1) != 1) throw std::runtime_error("cannot wait");
        barrier(*group);
      },
      0);
  ::close(ready[1]);
  ::close(go[0]);
  char c = 0;
  for (int r = 0; r < 2; ++r) ASSERT_EQ(::read(ready[0], &c, 1), 1);
  // Set up and still running: rings and buffers are mapped, and none has a name left.
  for (int r = 0; r < 2; ++r) {
    const auto mapped = braid_mappings(job.pid(r));
    EXPECT_FALSE(mapped.empty()) << "rank " << r << " maps no shared memory";
    EXPECT_EQ(left_in_dev_shm(mapped), std::vector<std::string>{}) << "rank " << r;
  }
  const char go_on[2] = {1, 1};
  ASSERT_EQ(::write(go[1], go_on, 2), 2);
  ::close(go[1]);
  ::close(ready[0]);
  EXPECT_TRUE(job.join()) << "a rank failed (its error is above)";
}

}  // namespace
}  // namespace braid::comm
