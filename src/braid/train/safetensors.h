// Reading and writing safetensors files (https://github.com/huggingface/safetensors), the
// format PyTorch and Hugging Face tools exchange weights in:
//
//   8 bytes   N, little-endian u64: length of the header
//   N bytes   JSON {"__metadata__": {str: str}, name: {"dtype": "F32", "shape": [..],
//             "data_offsets": [begin, end]}, ...}, space-padded to a multiple of 8
//   the rest  the data section; offsets are relative to its start
//
// The writer lists tensors in the header in the caller's order and packs their bytes with
// no gaps (safetensors readers reject gaps), ordered by element size, largest first, as
// the reference writer does: with the data section starting 8-byte aligned, every tensor
// is then naturally aligned. It records the XXH64 of the data section as metadata
// "braid.xxh64" and replaces the file atomically (train/atomic_file.h).
//
// The reader validates everything before allocating anything whose size the file
// controls: the header length against the file size and a 100 MiB cap, the JSON, every
// dtype, shape, and offset range (with overflow checks), overlaps, and the checksum when
// present (files written by other tools lack it and are accepted). Errors are
// braid::Error naming the file, the tensor and the fault; OS failures are IoError.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "train/atomic_file.h"

namespace braid::train {

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

inline constexpr std::string_view kChecksumKey = "braid.xxh64";
inline constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// "F32", "BF16", "F16", "I32", "I64": the dtype names safetensors uses.
std::string_view safetensors_dtype(DType dtype);

// Writes `tensors` (unique, non-empty names) to `path`; returns the file's size and XXH64.
// "braid.xxh64" in `metadata` is replaced by the computed checksum.
FileDigest write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                             const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::vector<NamedTensor> tensors;  // in header order; each owns its memory
  std::map<std::string, std::string> metadata;
  // The tensor named `name`, or nullptr.
  const Tensor* find(const std::string& name) const;
};

SafetensorsFile read_safetensors(const std::string& path);

// Parses a safetensors image held in memory; `source` names it in errors (a path).
SafetensorsFile parse_safetensors(const void* data, size_t size, const std::string& source);

}  // namespace braid::train
