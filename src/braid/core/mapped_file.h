// A whole file mapped read-only into memory, for formats validated in place before
// anything is copied out (safetensors, checkpoints) and for data read on demand (.npy
// features larger than memory, data/npy_mapped.h). Reading costs no allocation sized by
// the file, so a hostile length field cannot make the reader allocate, and the kernel
// pages the file in and out as it is touched: resident memory stays bounded by the OS,
// not by the file.
//
// The file must not be truncated while mapped (that raises SIGBUS on access); braid only
// replaces files by rename, which leaves an open mapping intact. Move-only; advise() may
// be called from any thread (madvise is a hint and changes no data).
#pragma once

#include <cstddef>
#include <string>

namespace braid {

class MappedFile {
 public:
  // How the file will be read, passed to madvise: sequential (read-ahead, pages dropped
  // behind: a checkpoint read front to back) or random (no read-ahead: a shuffled dataset,
  // where read-ahead would fetch neighbours nobody asked for).
  enum class Access : unsigned char { sequential, random };

  // IoError naming the path when it cannot be opened, is not a regular file, or mmap fails.
  explicit MappedFile(std::string path, Access access = Access::sequential);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) = delete;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Asks the kernel to start reading [offset, offset + length) now (MADV_WILLNEED), so the
  // page faults of a batch about to be copied overlap instead of queueing one by one.
  void will_need(size_t offset, size_t length) const;
  // Unmaps the pages of [offset, offset + length) from this process (MADV_DONTNEED), the
  // whole 64 KiB windows it touches (what a fault maps around itself): they stay in the page cache,
  // and a later read faults them in again with the same bytes (the mapping is read-only, so nothing
  // of it is lost). Keeps RSS at what is being read instead of all that was ever read.
  void release(size_t offset, size_t length) const;

 private:
  std::string path_;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace braid
