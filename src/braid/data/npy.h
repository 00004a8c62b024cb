// Reader for NumPy .npy files (format 1.0, 2.0 and 3.0,
// https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html), so users can
// train on their own arrays: np.save("x.npy", features); np.save("y.npy", labels).
//
// Supported element types: little-endian '<f4', '<f8', '<i4', '<i8' and '|u1', in C order.
// Everything in the header is validated before any data is allocated: the magic, the
// version, a bounded header length, the python-dict header (parsed by a small strict
// parser), and the declared shape against the file's actual size.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/memory.h"
#include "data/dataset.h"

namespace braid::data {

enum class NpyType : uint8_t { f4, f8, u1, i4, i8 };
size_t npy_type_size(NpyType t);
std::string_view npy_type_descr(NpyType t);  // "<f4", ...

inline constexpr size_t kNpyMaxHeaderBytes = 65536;

struct NpyHeader {
  NpyType type = NpyType::f4;
  std::vector<int64_t> shape;  // empty for a 0-d array
  bool fortran_order = false;
  int64_t numel() const;
};

// Parses the header's dict text, e.g. "{'descr': '<f4', 'fortran_order': False,
// 'shape': (3, 4), }". Throws braid::Error saying what is wrong; never reads out of bounds.
NpyHeader parse_npy_header(std::string_view text);

struct NpyArray {
  NpyHeader header;
  Buffer data;  // numel * npy_type_size bytes as stored, MemCategory::data
};

NpyArray read_npy(const std::string& path);

// features: [N, ...] of any supported type, converted to f32 (values kept as they are:
// u1 pixels stay 0..255). labels: [N] of an integer type, each in [0, 2^31 - 1);
// num_classes = max label + 1.
ArrayDataset load_npy_dataset(const std::string& features_path, const std::string& labels_path);

}  // namespace braid::data
