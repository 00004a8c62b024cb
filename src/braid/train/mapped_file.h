// A whole file mapped read-only into memory, for formats validated in place before
// anything is copied out (safetensors, checkpoints). Reading costs no allocation sized by
// the file, so a hostile length field cannot make the reader allocate.
//
// The file must not be truncated while mapped (that raises SIGBUS on access); braid only
// replaces files by rename, which leaves an open mapping intact. Move-only.
#pragma once

#include <cstddef>
#include <string>

namespace braid::train {

class MappedFile {
 public:
  // IoError naming the path when it cannot be opened, is not a regular file, or mmap fails.
  explicit MappedFile(std::string path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) = delete;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace braid::train
