// Read-only mappings (see mapped_file.h).
#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace braid {

MappedFile::MappedFile(std::string path, Access access) : path_(std::move(path)) {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) BRAID_THROW(IoError, "cannot open '", path_, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    BRAID_THROW(IoError, "cannot stat '", path_, "': ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    BRAID_THROW(IoError, "'", path_, "' is not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      BRAID_THROW(IoError, "cannot map '", path_, "' (", size_, " bytes): ", std::strerror(err));
    }
    ::madvise(p, size_, access == Access::random ? MADV_RANDOM : MADV_SEQUENTIAL);
    data_ = static_cast<const unsigned char*>(p);
  }
  ::close(fd);  // the mapping keeps the file's pages reachable
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
}

void MappedFile::will_need(size_t offset, size_t length) const {
  if (!data_ || offset >= size_) return;
  // madvise takes a page-aligned start: round down, and clip the end to the mapping.
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t begin = offset / page * page;
  const size_t end = offset + std::min(length, size_ - offset);
  ::madvise(const_cast<unsigned char*>(data_) + begin, end - begin, MADV_WILLNEED);
}

void MappedFile::release(size_t offset, size_t length) const {
  if (!data_ || offset >= size_) return;
  // A read fault also maps the cached pages around it (the kernel's fault-around: an
  // aligned 64 KiB window by default), so release the whole windows the range touches, or
  // RSS grows with every cached neighbour ever mapped.
  constexpr size_t kWindow = 64 * 1024;
  const size_t begin = offset / kWindow * kWindow;
  const size_t end = std::min(
      size_, (offset + std::min(length, size_ - offset) + kWindow - 1) / kWindow * kWindow);
  ::madvise(const_cast<unsigned char*>(data_) + begin, end - begin, MADV_DONTNEED);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

}  // namespace braid
