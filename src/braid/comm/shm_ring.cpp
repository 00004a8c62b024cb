// Futex doorbells and /dev/shm segments for shm_ring.h. Futexes are shared (not
// FUTEX_PRIVATE), keyed by the page, so processes mapping a segment at different
// addresses wait on the same word.
#include "comm/shm_ring.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>

#include "core/error.h"

namespace braid::comm::shm {

namespace {

long futex(std::atomic<uint32_t>& word, int op, uint32_t value, const timespec* timeout) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), op, value, timeout, nullptr, 0);
}

}  // namespace

void ring(Doorbell& d) {
  // Orders the caller's publish before reading `sleeping`; pairs with the fence in
  // sleep_until_rung, so either the sleeper sees the publish or we see it asleep.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (d.sleeping.load(std::memory_order_relaxed) == 0) return;
  d.seq.fetch_add(1, std::memory_order_seq_cst);
  futex(d.seq, FUTEX_WAKE, INT_MAX, nullptr);
}

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0) return;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
  futex(word, FUTEX_WAIT, expected, &ts);  // EAGAIN, EINTR, ETIMEDOUT: the caller re-checks
}

Mapping::Mapping(int fd, size_t offset, size_t length, const std::string& what) {
  void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
                   static_cast<off_t>(offset));
  if (p == MAP_FAILED)
    BRAID_THROW(IoError, "cannot map ", length, " bytes of ", what, ": ", std::strerror(errno));
  data_ = static_cast<uint8_t*>(p);
  size_ = length;
}

Mapping::~Mapping() {
  if (data_) ::munmap(data_, size_);
}

Mapping::Mapping(Mapping&& other) noexcept : data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

Mapping& Mapping::operator=(Mapping&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(data_, size_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

int create_segment(const std::string& name, size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0)
    BRAID_THROW(IoError, "cannot create shared-memory segment /dev/shm", name, ": ",
                std::strerror(errno));
  // posix_fallocate allocates every page now: a full /dev/shm fails here, not later as a
  // SIGBUS on first touch.
  const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (err != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    BRAID_THROW(IoError, "cannot allocate ", bytes, " bytes for shared-memory segment /dev/shm",
                name, ": ", std::strerror(err),
                " (is /dev/shm full or too small? `df -h /dev/shm`; lower "
                "TransportOptions::shm_ring_bytes or use the tcp transport)");
  }
  return fd;
}

int create_anonymous_segment(const char* kind, size_t bytes, std::string& locator) {
  const std::string label = std::string("braid-") + kind;
  const int fd = ::memfd_create(label.c_str(), MFD_CLOEXEC);
  if (fd < 0)
    BRAID_THROW(IoError, "cannot create anonymous shared memory (", label,
                "): memfd_create failed: ", std::strerror(errno));
  const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  struct stat st {};
  if (err != 0 || ::fstat(fd, &st) != 0) {
    ::close(fd);
    BRAID_THROW(IoError, "cannot allocate ", bytes, " bytes of shared memory (", label,
                "): ", std::strerror(err != 0 ? err : errno),
                " (is memory short? lower TransportOptions::shm_ring_bytes or use the tcp "
                "transport)");
  }
  locator = "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd) + "@" +
            std::to_string(static_cast<uint64_t>(st.st_ino));
  return fd;
}

uint64_t pid_namespace() {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

namespace {

// A peer's anonymous segment through its locator (create_anonymous_segment).
int open_anonymous(const std::string& locator, const std::string& what) {
  const size_t at = locator.rfind('@');
  const std::string path = locator.substr(0, at);
  uint64_t inode = 0;
  try {
    inode = std::stoull(locator.substr(at + 1));
  } catch (const std::exception&) {
    BRAID_THROW(IoError, what, ": malformed segment locator '", locator, "'");
  }
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0)
    BRAID_THROW(IoError, "cannot open ", what, " (", path, "): ", std::strerror(errno),
                errno == ENOENT ? " (its process is gone, or runs in another pid namespace)"
                : errno == EACCES || errno == EPERM
                    ? " (every rank must run as the same user, and none may be made "
                      "undumpable)"
                    : "");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_ino) != inode) {
    ::close(fd);
    BRAID_THROW(IoError, "cannot open ", what, ": ", path,
                " is not the segment it published (its process is gone and the pid reused?)");
  }
  return fd;
}

}  // namespace

int open_segment(const std::string& name, size_t bytes, const std::string& what) {
  if (name.rfind("/proc/", 0) == 0) {
    const int fd = open_anonymous(name, what);
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < bytes) {
      ::close(fd);
      BRAID_THROW(IoError, what, " is ", st.st_size, " bytes, expected ", bytes);
    }
    return fd;
  }
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0)
    BRAID_THROW(IoError, "cannot open ", what, " (/dev/shm", name, "): ", std::strerror(errno),
                errno == ENOENT ? " (the shm transport needs every rank on one host; use tcp "
                                  "or auto across hosts)"
                                : "");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < bytes) {
    ::close(fd);
    BRAID_THROW(IoError, what, " (/dev/shm", name, ") is ", st.st_size, " bytes, expected ", bytes);
  }
  return fd;
}

}  // namespace braid::comm::shm
