#include "train/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace braid::train {
namespace {

constexpr size_t kGatherBytes = 256 * 1024;

std::string os_reason() { return std::strerror(errno); }

std::string directory_of(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// Same directory (so rename stays atomic on one file system), hidden, and unique per
// process and call so concurrent writers never share a temporary file.
std::string temp_name_for(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  const std::filesystem::path p(path);
  // Appended piece by piece: GCC 12 flags "." + std::string with a false -Wrestrict.
  std::string name = ".";
  name += p.filename().string();
  name += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  return (p.parent_path() / name).string();
}

}  // namespace

AtomicFile::AtomicFile(std::string path)
    : path_(std::move(path)), temp_path_(temp_name_for(path_)) {
  BRAID_CHECK(!path_.empty() && std::filesystem::path(path_).has_filename(),
              "cannot write a file at '", path_, "': not a file name");
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0)
    BRAID_THROW(IoError, "cannot create '", temp_path_, "' to write '", path_, "': ", os_reason());
  pending_.reserve(kGatherBytes);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_path_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t size) {
  BRAID_CHECK(fd_ >= 0, "write to '", path_, "' after commit");
  if (size == 0) return;
  hash_.update(data, size);
  bytes_ += size;
  const char* bytes = static_cast<const char*>(data);
  if (pending_.size() + size <= kGatherBytes) {
    pending_.insert(pending_.end(), bytes, bytes + size);
    return;
  }
  flush();
  if (size < kGatherBytes)
    pending_.insert(pending_.end(), bytes, bytes + size);
  else
    write_fully(bytes, size);
}

void AtomicFile::flush() {
  write_fully(pending_.data(), pending_.size());
  pending_.clear();
}

void AtomicFile::write_fully(const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd_, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      BRAID_THROW(IoError, "cannot write '", temp_path_, "' (for '", path_, "'): ", os_reason());
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

FileDigest AtomicFile::commit() {
  BRAID_CHECK(fd_ >= 0, "'", path_, "' committed twice");
  flush();
  if (::fsync(fd_) != 0)
    BRAID_THROW(IoError, "cannot fsync '", temp_path_, "' (for '", path_, "'): ", os_reason());
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    ::unlink(temp_path_.c_str());
    BRAID_THROW(IoError, "cannot close '", temp_path_, "' (for '", path_, "'): ", os_reason());
  }
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const std::string reason = os_reason();
    ::unlink(temp_path_.c_str());
    BRAID_THROW(IoError, "cannot rename '", temp_path_, "' to '", path_, "': ", reason);
  }
  fsync_directory(directory_of(path_));
  return {bytes_, hash_.digest()};
}

FileDigest write_file_atomic(const std::string& path, std::string_view contents) {
  AtomicFile file(path);
  file.write(contents);
  return file.commit();
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) BRAID_THROW(IoError, "cannot open directory '", dir, "' to fsync it: ", os_reason());
  const int rc = ::fsync(fd);
  const std::string reason = rc != 0 ? os_reason() : "";
  ::close(fd);
  if (rc != 0) BRAID_THROW(IoError, "cannot fsync directory '", dir, "': ", reason);
}

}  // namespace braid::train
