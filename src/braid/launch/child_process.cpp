// spawn_child: a close-on-exec status pipe tells the parent whether execve succeeded (EOF)
// or failed (the child writes errno), the classic way to report exec errors from fork.
#include "launch/child_process.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace braid::launch {
namespace {

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// A close-on-exec fd numbered above 2, so dup2 onto 0..2 in the child never clobbers it.
int above_stdio(int fd) {
  if (fd > 2) return fd;
  const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  const int err = errno;
  ::close(fd);
  if (moved < 0) BRAID_THROW(IoError, "launch: fcntl(F_DUPFD_CLOEXEC): ", std::strerror(err));
  return moved;
}

void make_pipe(int fds[2]) {
  if (::pipe2(fds, O_CLOEXEC) != 0)
    BRAID_THROW(IoError, "launch: cannot create a pipe: ", std::strerror(errno));
  fds[0] = above_stdio(fds[0]);
  fds[1] = above_stdio(fds[1]);
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

std::string resolve_command(const std::string& command, const std::string& path_list) {
  if (command.empty()) BRAID_THROW(Error, "the command to run is empty");
  if (command.find('/') != std::string::npos) {
    struct stat st {};
    if (::stat(command.c_str(), &st) != 0)
      BRAID_THROW(Error, "cannot run '", command, "': ", std::strerror(errno));
    if (!S_ISREG(st.st_mode) || ::access(command.c_str(), X_OK) != 0)
      BRAID_THROW(Error, "cannot run '", command, "': not an executable file");
    return command;
  }
  size_t start = 0;
  while (start <= path_list.size()) {
    size_t end = path_list.find(':', start);
    if (end == std::string::npos) end = path_list.size();
    const std::string dir = end == start ? "." : path_list.substr(start, end - start);
    const std::string candidate = dir + "/" + command;
    if (is_executable_file(candidate)) return candidate;
    start = end + 1;
  }
  BRAID_THROW(Error, "cannot run '", command, "': no executable of that name in PATH (", path_list,
              ")");
}

ChildProcess spawn_child(const ChildSpec& spec) {
  // Everything the child needs is built before fork: it may not allocate after it.
  std::vector<char*> argv, envp;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int out[2] = {-1, -1}, err[2] = {-1, -1}, status[2] = {-1, -1};
  int devnull = -1;
  try {
    make_pipe(out);
    make_pipe(err);
    make_pipe(status);
    devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0) BRAID_THROW(IoError, "launch: cannot open /dev/null: ", std::strerror(errno));
    devnull = above_stdio(devnull);
  } catch (...) {
    for (int* fd : {&out[0], &out[1], &err[0], &err[1], &status[0], &status[1]}) close_fd(*fd);
    throw;
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the launcher died before prctl
    ::dup2(devnull, 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s : spec.reset_signals) ::sigaction(s, &dfl, nullptr);
    ::sigprocmask(SIG_SETMASK, &spec.mask, nullptr);
    ::execve(spec.path.c_str(), argv.data(), envp.data());
    const int e = errno;
    [[maybe_unused]] ssize_t n = ::write(status[1], &e, sizeof e);
    ::_exit(127);
  }
  const int fork_errno = errno;
  close_fd(out[1]);
  close_fd(err[1]);
  close_fd(status[1]);
  close_fd(devnull);
  if (pid < 0) {
    for (int* fd : {&out[0], &err[0], &status[0]}) close_fd(*fd);
    BRAID_THROW(IoError, "launch: fork failed: ", std::strerror(fork_errno));
  }
  // Both sides set the group, so it exists whichever runs first (EACCES once it exec'd).
  ::setpgid(pid, pid);

  int exec_errno = 0;
  ssize_t n;
  do {
    n = ::read(status[0], &exec_errno, sizeof exec_errno);
  } while (n < 0 && errno == EINTR);
  close_fd(status[0]);
  if (n > 0) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    close_fd(out[0]);
    close_fd(err[0]);
    BRAID_THROW(Error, "cannot run '", spec.argv.empty() ? spec.path : spec.argv[0], "' (",
                spec.path, "): ", std::strerror(exec_errno));
  }
  return ChildProcess{pid, out[0], err[0]};
}

}  // namespace braid::launch
