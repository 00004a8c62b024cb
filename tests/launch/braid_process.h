// A braid (or any) command run by a test as a real child process: its own environment
// (the test's, minus BRAID_* and any name given, plus `vars`), stdout and stderr merged
// on one pipe, read as it comes so a test can wait for a line, signal it, and reap it.
// A child that neither writes nor ends for kStallSeconds is a hang: its threads' kernel
// waits are appended to its output, it is killed, and the wait that saw it fails, so the
// test reports where it stopped instead of running into ctest's timeout with no output.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <map>
#include <string>
#include <vector>

extern char** environ;

namespace braid::testing {

class Process {
 public:
  // `args[0]` is run as given (a path). `own_group`: the child leads a new process group,
  // as `timeout` and shells' job control make one.
  Process(const std::vector<std::string>& args, const std::map<std::string, std::string>& vars = {},
          bool own_group = false) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      const std::string name = entry.substr(0, entry.find('='));
      // A test run under some launcher must not hand its variables to these ranks; the
      // suite's kernel choices (CMakeLists.txt) go on.
      const bool braid_var =
          name.rfind("BRAID_", 0) == 0 && name != "BRAID_GEMM" && name != "BRAID_CONV";
      if (vars.count(name) == 0 && !braid_var) env.push_back(entry);
    }
    for (const auto& [k, v] : vars) env.push_back(k + "=" + v);
    std::vector<std::string> all = args;
    std::vector<char*> argv, envp;
    for (std::string& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    int out[2];
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      if (own_group) ::setpgid(0, 0);
      ::dup2(out[1], 1);
      ::dup2(out[1], 2);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    if (own_group) ::setpgid(pid_, pid_);
    ::close(out[1]);
    fd_ = out[0];
  }
  ~Process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      finish();
    }
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }

  // Reads until the output holds `count` occurrences of `text`; false if it ended first.
  bool wait_for(const std::string& text, int count = 1) {
    while (occurrences(output_, text) < count)
      if (!pump()) return false;
    return true;
  }

  // Reads everything and reaps the child: its exit code, or 128 + the signal.
  int finish() {
    while (pump()) {
    }
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  const std::string& output() const { return output_; }

  static int occurrences(const std::string& s, const std::string& word) {
    int n = 0;
    for (size_t p = s.find(word); p != std::string::npos; p = s.find(word, p + 1)) ++n;
    return n;
  }

 private:
  static constexpr int kStallSeconds = 300;

  // Each thread's name, kernel wait channel and syscall line, from /proc.
  std::string thread_waits() const {
    std::string out;
    const std::string tasks = "/proc/" + std::to_string(pid_) + "/task";
    DIR* dir = ::opendir(tasks.c_str());
    if (dir == nullptr) return "(no /proc entry)\n";
    while (const dirent* e = ::readdir(dir)) {
      if (e->d_name[0] == '.') continue;
      const std::string base = tasks + "/" + e->d_name + "/";
      std::string comm, wchan, syscall;
      std::getline(std::ifstream(base + "comm"), comm);
      std::getline(std::ifstream(base + "wchan"), wchan);
      std::getline(std::ifstream(base + "syscall"), syscall);
      out += "  thread " + std::string(e->d_name) + " (" + comm + "): wchan " + wchan +
             ", syscall " + syscall + "\n";
    }
    ::closedir(dir);
    return out;
  }

  // One read; false at the end of the output (or at a hang, which kills the child).
  bool pump() {
    if (fd_ < 0) return false;
    pollfd readable{fd_, POLLIN, 0};
    const int ready = ::poll(&readable, 1, kStallSeconds * 1000);
    if (ready < 0 && errno == EINTR) return true;
    if (ready == 0) {
      output_ += "\n[test harness: pid " + std::to_string(pid_) +
                 " wrote nothing and did not end for " + std::to_string(kStallSeconds) +
                 " s; killed. Its threads:\n" + thread_waits() + "]\n";
      ADD_FAILURE() << "child " << pid_ << " hung; its output:\n" << output_;
      ::kill(pid_, SIGKILL);
      ::close(fd_);
      fd_ = -1;
      return false;
    }
    char buf[4096];
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) return true;
    if (n <= 0) {
      ::close(fd_);
      fd_ = -1;
      return false;
    }
    output_.append(buf, static_cast<size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  std::string output_;
};

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace braid::testing
