// What the launcher says about a rank killed by SIGKILL, over fake cgroup files and a fake
// kernel log: the OOM killer is named as the likely cause only when a record says so.
// Also MemAvailable parsing (core/host_memory.h), which the benchmarks check first.
#include "launch/oom_watch.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/host_memory.h"
#include "temp_dir.h"

namespace braid::launch {
namespace {

void write(const std::string& path, const std::string& text, bool append = false) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, append ? std::ios::app : std::ios::trunc);
  out << text;
}

TEST(OomWatch, ParsesTheCounterOfBothCgroupVersions) {
  EXPECT_EQ(parse_oom_kill_count("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\noom_group_kill 0\n"), 2);
  EXPECT_EQ(parse_oom_kill_count("oom_kill_disable 0\nunder_oom 0\noom_kill 17\n"), 17);
  EXPECT_FALSE(parse_oom_kill_count("oom_kill_disable 0\n").has_value());
  EXPECT_FALSE(parse_oom_kill_count("oom_kill x\n").has_value());
  EXPECT_FALSE(parse_oom_kill_count("oom_kill 99999999999999999999999\n").has_value());
}

TEST(OomWatch, KernelLogRecordsNameTheProcess) {
  EXPECT_TRUE(record_reports_oom_kill(
      "3,811,123,-;Out of memory: Killed process 4242 (braid) total-vm:1kB\n", 4242));
  EXPECT_TRUE(record_reports_oom_kill(
      "6,810,123,-;oom-kill:constraint=CONSTRAINT_NONE,task=braid,pid=4242,uid=0\n", 4242));
  EXPECT_TRUE(record_reports_oom_kill("oom-kill:task=braid,pid=4242", 4242));
  EXPECT_FALSE(record_reports_oom_kill("Out of memory: Killed process 42420 (braid)\n", 4242));
  EXPECT_FALSE(record_reports_oom_kill("oom-kill:task=braid,pid=42420,uid=0\n", 4242));
  EXPECT_FALSE(record_reports_oom_kill("usb 1-1: new device pid=4242,\n", 4242));
}

TEST(OomWatch, CounterFilesFromProcSelfCgroup) {
  EXPECT_EQ(oom_counter_candidates("0::/user.slice/job\n", "/cg"),
            (std::vector<std::string>{"/cg/user.slice/job/memory.events",
                                      "/cg/unified/user.slice/job/memory.events"}));
  EXPECT_EQ(oom_counter_candidates("4:memory:/a/b\n1:cpu:/\n0::/\n", "/cg"),
            (std::vector<std::string>{"/cg/memory/a/b/memory.oom_control", "/cg/memory.events",
                                      "/cg/unified/memory.events"}));
  EXPECT_TRUE(oom_counter_candidates("garbage", "/cg").empty());
}

class OomWatchFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    write(dir_.file("self_cgroup"), "0::/job\n");
    write(dir_.file("cg/job/memory.events"), "oom 0\noom_kill 1\n");
    write(dir_.file("kmsg"), "6,1,1,-;Out of memory: Killed process 77 (old)\n");
  }
  std::string explain(pid_t pid) { return watch_->explain_sigkill(pid); }
  void start() {
    watch_ =
        std::make_unique<OomWatch>(dir_.file("cg"), dir_.file("self_cgroup"), dir_.file("kmsg"));
  }
  braid::testing::TempDir dir_;
  std::unique_ptr<OomWatch> watch_;
};

TEST_F(OomWatchFiles, CounterThatRoseIsTheLikelyCause) {
  start();
  write(dir_.file("cg/job/memory.events"), "oom 1\noom_kill 2\n");
  const std::string s = explain(77);  // 77's record predates the watch: not evidence
  EXPECT_NE(s.find("OOM killer is the likely cause"), std::string::npos) << s;
  EXPECT_NE(s.find("rose from 1 to 2"), std::string::npos) << s;
}

TEST_F(OomWatchFiles, KernelLogNamingThePidIsTheLikelyCause) {
  start();
  write(dir_.file("kmsg"), "3,2,2,-;Memory cgroup out of memory: Killed process 123 (braid)\n",
        true);
  const std::string s = explain(123);
  EXPECT_NE(s.find("OOM killer is the likely cause"), std::string::npos) << s;
  EXPECT_NE(s.find("killed process 123"), std::string::npos) << s;
}

TEST_F(OomWatchFiles, NoRecordMeansAnotherProcessProbablySentIt) {
  start();
  const std::string s = explain(77);
  EXPECT_EQ(s.find("likely cause"), std::string::npos) << s;
  EXPECT_NE(s.find("another process probably sent it"), std::string::npos) << s;
  EXPECT_NE(s.find("unchanged at 1"), std::string::npos) << s;
}

TEST_F(OomWatchFiles, NothingReadableSaysMemoryMayBeTheCause) {
  watch_ = std::make_unique<OomWatch>(dir_.file("none"), dir_.file("none"), dir_.file("none"));
  const std::string s = explain(5);
  EXPECT_EQ(s.find("likely cause"), std::string::npos) << s;
  EXPECT_NE(s.find("OOM killer (memory ran out), or another process"), std::string::npos) << s;
  EXPECT_NE(s.find("'Killed process 5'"), std::string::npos) << s;
}

TEST(HostMemory, MemAvailable) {
  EXPECT_EQ(parse_mem_available("MemTotal: 10 kB\nMemAvailable:   2048 kB\n"), 2048u * 1024);
  EXPECT_FALSE(parse_mem_available("MemTotal: 10 kB\n").has_value());
  EXPECT_FALSE(parse_mem_available("MemAvailable: lots\n").has_value());
  EXPECT_FALSE(parse_mem_available("MemAvailable: 99999999999999999999 kB\n").has_value());
  EXPECT_TRUE(mem_available_bytes().has_value()) << "this test runs on Linux";
  EXPECT_FALSE(mem_available_bytes("/nonexistent/meminfo").has_value());
  EXPECT_EQ(describe_bytes(512), "512 B");
  // Every rank on the host counts: 4 x 30 fits in 150 alone, not with a tenth kept free.
  const MemoryFit four = fit_in_memory(30, 4, 150);
  EXPECT_EQ(four.need, 120u);
  EXPECT_EQ(four.usable, 135u);
  EXPECT_TRUE(four.fits);
  EXPECT_FALSE(fit_in_memory(30, 5, 150).fits);
  EXPECT_FALSE(fit_in_memory(UINT64_MAX / 2, 3, UINT64_MAX).fits) << "overflow must not fit";
  EXPECT_EQ(fit_in_memory(UINT64_MAX / 2, 3, 1).need, UINT64_MAX);
  EXPECT_EQ(describe_bytes(uint64_t{3} << 29), "1.5 GiB");
}

}  // namespace
}  // namespace braid::launch
