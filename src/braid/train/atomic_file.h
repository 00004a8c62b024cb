// Crash-safe file replacement: AtomicFile writes to a hidden temporary file in the
// destination's directory, and commit() fsyncs it, renames it over the destination and
// fsyncs the directory. A reader therefore sees the old file or the complete new one,
// never a torn one, even across a power cut. Dropping an AtomicFile without commit()
// (an exception on the way) removes the temporary file.
//
// It also counts and hashes (XXH64) every byte written, so a caller can record the file's
// size and checksum in a commit record without reading the file back.
//
// Move-only; not thread-safe. Errors are IoError naming the path and the OS's reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/checksum.h"

namespace braid::train {

// Size and XXH64 of a file's full contents.
struct FileDigest {
  uint64_t bytes = 0;
  uint64_t xxh64 = 0;
};

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Makes the file durable under its final name. At most once; no writes afterwards.
  FileDigest commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  void flush();
  void write_fully(const char* data, size_t size);

  std::string path_, temp_path_;
  int fd_ = -1;
  std::vector<char> pending_;  // small writes are gathered into one syscall
  uint64_t bytes_ = 0;
  Xxh64Stream hash_;
};

// Replaces `path` with `contents` atomically (see AtomicFile).
FileDigest write_file_atomic(const std::string& path, std::string_view contents);

// fsyncs a directory, making a rename or unlink inside it durable.
void fsync_directory(const std::string& dir);

}  // namespace braid::train
