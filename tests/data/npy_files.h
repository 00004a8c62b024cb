// Test helpers: .npy files written byte by byte, as numpy.save writes them.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace braid::data::testing_util {

// Magic, version, little-endian header length, the dict padded with spaces and a newline
// to a multiple of 64 bytes, then the data.
inline std::string npy_file_bytes(const std::string& descr, const std::string& shape,
                                  const std::string& data) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\0';
  const auto len = static_cast<uint16_t>(dict.size());
  out += static_cast<char>(len & 0xFF);
  out += static_cast<char>(len >> 8);
  return out + dict + data;
}

template <typename T>
std::string raw_bytes(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
  return s;
}

}  // namespace braid::data::testing_util
