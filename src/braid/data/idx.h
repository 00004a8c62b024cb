// Reader for IDX files (the MNIST format, http://yann.lecun.com/exdb/mnist/), gzipped or
// plain: a big-endian header (0x00 0x00 <type> <ndims>, then ndims u32 sizes) and the data.
//
// Only unsigned bytes (type 0x08) are read; other element types are refused by name. The
// declared size is checked against max_bytes before anything is allocated, and against the
// bytes actually present after reading, so a corrupt or hostile header fails fast with an
// IoError naming the file, what is wrong and what to do.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/memory.h"

namespace braid::data {

inline constexpr uint64_t kIdxMaxBytes = uint64_t{2} << 30;  // 2 GiB

struct IdxArray {
  std::vector<int64_t> dims;  // 1..4 sizes
  Buffer data;                // product(dims) bytes, MemCategory::data
  int64_t numel() const;
  const uint8_t* bytes() const { return static_cast<const uint8_t*>(data.data()); }
};

// `hint` is appended to errors, e.g. "install the dataset-fashion-mnist package".
IdxArray read_idx(const std::string& path, const std::string& hint = "",
                  uint64_t max_bytes = kIdxMaxBytes);

}  // namespace braid::data
