// Reader for NumPy .npy files (format 1.0, 2.0 and 3.0,
// https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html), so users can
// train on their own arrays: np.save("x.npy", features); np.save("y.npy", labels).
//
// Element types: every numeric dtype numpy writes: floats f2 (half), f4, f8; signed
// integers i1, i2, i4, i8; unsigned u1, u2, u4, u8; bool b1; in either byte order ('<'
// little-endian, '>' big-endian, '|' not applicable, '=' native), in C order. Complex,
// object, string, void and datetime arrays are refused with an error naming the dtype.
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

// One element type: its kind, its width in bytes and its byte order.
struct NpyType {
  enum class Kind : uint8_t { floating, signed_int, unsigned_int, boolean };
  Kind kind = Kind::floating;
  uint8_t size = 4;         // bytes: 2, 4, 8 for floats; 1, 2, 4, 8 for integers; 1 for bool
  bool big_endian = false;  // '>' (only meaningful for size > 1)
  bool is_float() const { return kind == Kind::floating; }
  friend bool operator==(const NpyType&, const NpyType&) = default;
};
size_t npy_type_size(NpyType t);
// numpy's spelling: "<f4", ">i2", "|u1", "|b1".
std::string npy_type_descr(NpyType t);

inline constexpr size_t kNpyMaxHeaderBytes = 65536;

struct NpyHeader {
  NpyType type;                // f4, little-endian, until parsed
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

// Where a validated file's data lies. read_npy_layout checks everything read_npy does
// (the magic, the version, the header, C order, the shape against the file's size) and
// reads nothing past the header: IoError naming the file otherwise.
struct NpyFileLayout {
  NpyHeader header;
  uint64_t data_offset = 0;  // bytes of prefix and header before the data
  uint64_t data_bytes = 0;   // numel * npy_type_size
};
NpyFileLayout read_npy_layout(const std::string& path);

// `count` elements of `type` as stored at `src` (any alignment, the file's byte order),
// converted to f32 as load_npy_dataset converts them.
void npy_to_f32(NpyType type, const unsigned char* src, uint64_t count, float* dst);

// Features must be [N, ...] with at least 2 dimensions: IoError naming `path` otherwise.
void check_npy_features(const std::string& path, const NpyHeader& header);

// Labels [n] of an integer or bool type, each in [0, 2^31 - 1), as i32; num_classes is
// the largest + 1. A count other than n is an error naming both files.
struct NpyLabels {
  Tensor labels;  // i32 [n], MemCategory::data
  int32_t num_classes = 0;
};
NpyLabels read_npy_labels(const std::string& labels_path, int64_t n,
                          const std::string& features_path);

// How a file's 4-dimensional features hold images: [N, C, H, W] (PyTorch's order, what
// `np.save(path, tensor.numpy())` writes) or [N, H, W, C]. braid's layers take NHWC.
enum class ImageLayout : uint8_t { nchw, nhwc };
ImageLayout parse_image_layout(std::string_view name);  // "nchw", "nhwc"
std::string_view image_layout_name(ImageLayout layout);

// features: [N, ...] of any supported type, converted to f32 (values kept as they are:
// u1 pixels stay 0..255, bools become 0 and 1). Features of 4 dimensions are images in
// `layout` and come back as [N, H, W, C] (NCHW is transposed a sample at a time, with no
// second copy of the data); other ranks come back as stored. labels: [N] of an integer or
// bool type, each in [0, 2^31 - 1); num_classes = max label + 1. Labels of a float type
// (f2, f4, f8) of shape [N] or [N, K] are numeric targets instead (regression, multi-label):
// ArrayDataset::targets, f32, every value finite; num_classes = K (1 for [N]).
ArrayDataset load_npy_dataset(const std::string& features_path, const std::string& labels_path,
                              ImageLayout layout);

}  // namespace braid::data
