#include "train/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "core/checksum.h"
#include "core/rng.h"
#include "test_files.h"

namespace braid::train {
namespace {

using testing::contains;
using testing::error_of;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  Rng rng(seed);
  auto* bytes = static_cast<unsigned char*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(rng.next_u32());
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

// A safetensors image from a header and a data section, laid out as the reference
// implementation writes it: u64 length, JSON padded with spaces to a multiple of 8, data.
std::string make_file(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  const uint64_t n = header.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + header + data;
}

std::string floats(std::initializer_list<float> values) {
  std::string out;
  for (float v : values) out.append(reinterpret_cast<const char*>(&v), sizeof v);
  return out;
}

std::vector<NamedTensor> every_dtype() {
  return {{"w", random_tensor({2, 3}, DType::f32, 1)},
          {"odd_bf16", random_tensor({5}, DType::bf16, 2)},
          {"half", random_tensor({3, 1}, DType::f16, 3)},
          {"ints", random_tensor({4}, DType::i32, 4)},
          {"count", random_tensor({}, DType::i64, 5)},
          {"empty", random_tensor({0}, DType::f32, 6)},
          {"empty_i64", random_tensor({2, 0, 3}, DType::i64, 7)},
          {"scalar", random_tensor({}, DType::f32, 8)},
          {"big_i64", random_tensor({3}, DType::i64, 9)}};
}

TEST(Safetensors, RoundTripsEveryDtypeRankZeroAndEmptyTensors) {
  TempDir dir;
  const auto tensors = every_dtype();
  const std::string path = dir.file("t.safetensors");
  const FileDigest digest = write_safetensors(path, tensors, {{"format", "pt"}, {"note", "hi"}});

  const SafetensorsFile file = read_safetensors(path);
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const NamedTensor& got = file.tensors[i];
    EXPECT_EQ(got.name, tensors[i].name);  // header order is the caller's order
    EXPECT_EQ(got.tensor.dtype(), tensors[i].tensor.dtype()) << got.name;
    EXPECT_EQ(got.tensor.shape(), tensors[i].tensor.shape()) << got.name;
    EXPECT_TRUE(same_bytes(got.tensor, tensors[i].tensor)) << got.name;
  }
  EXPECT_EQ(file.metadata.at("format"), "pt");
  EXPECT_EQ(file.metadata.at("note"), "hi");
  EXPECT_TRUE(parse_hex64(file.metadata.at(std::string(kChecksumKey))).has_value());
  ASSERT_NE(file.find("count"), nullptr);
  EXPECT_EQ(file.find("count")->rank(), 0);
  EXPECT_EQ(file.find("nope"), nullptr);

  const std::string bytes = read_bytes(path);
  EXPECT_EQ(digest.bytes, bytes.size());
  EXPECT_EQ(digest.xxh64, xxh64(bytes.data(), bytes.size()));
}

// What PyTorch's safetensors demands of a file: the header padded to a multiple of 8, and
// tensors covering the data section with no gaps; braid adds natural alignment.
TEST(Safetensors, LayoutIsWhatReferenceReadersAccept) {
  TempDir dir;
  const std::string path = dir.file("t.safetensors");
  write_safetensors(path, every_dtype());
  const std::string bytes = read_bytes(path);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const uint64_t begin = entry["data_offsets"][0], end = entry["data_offsets"][1];
    const std::string dtype = entry["dtype"];
    const uint64_t align = dtype == "I64" ? 8 : dtype == "F32" || dtype == "I32" ? 4 : 2;
    EXPECT_EQ(begin % align, 0u) << name;
    ranges.push_back({begin, end});
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t covered = 0;
  for (const auto& [begin, end] : ranges) {
    EXPECT_EQ(begin, covered);
    covered = end;
  }
  EXPECT_EQ(covered, bytes.size() - 8 - n);
}

TEST(Safetensors, ReadsAFileAsPyTorchWritesIt) {
  TempDir dir;
  const std::string path = dir.file("torch.safetensors");
  int64_t steps = 7;
  const std::string data =
      std::string(reinterpret_cast<const char*>(&steps), 8) + floats({1.5f, -2.0f, 0.25f});
  write_bytes(path, make_file(R"({"__metadata__":{"format":"pt"},)"
                              R"("n":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
                              R"("w":{"dtype":"F32","shape":[1,3],"data_offsets":[8,20]}})",
                              data));
  const SafetensorsFile file = read_safetensors(path);
  ASSERT_EQ(file.tensors.size(), 2u);
  EXPECT_EQ(file.find("n")->data<int64_t>()[0], 7);
  EXPECT_EQ(file.find("w")->shape(), Shape({1, 3}));
  EXPECT_EQ(file.find("w")->f32()[0], 1.5f);
  EXPECT_EQ(file.find("w")->f32()[2], 0.25f);
  EXPECT_EQ(file.metadata.size(), 1u);

  // Without any metadata at all, and nothing but an empty header.
  write_bytes(
      path, make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", floats({3, 4})));
  EXPECT_EQ(read_safetensors(path).find("w")->f32()[1], 4.0f);
  write_bytes(path, make_file("{}", ""));
  EXPECT_TRUE(read_safetensors(path).tensors.empty());
}

// The message read_safetensors gives for a file holding `bytes`; checks it names the file.
std::string read_error(const std::string& bytes) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  write_bytes(path, bytes);
  const int64_t allocations = MemoryTracker::process().allocations();
  std::string message = error_of([&] { read_safetensors(path); });
  EXPECT_TRUE(contains(message, path));
  // Validation happens before any tensor is allocated.
  EXPECT_EQ(MemoryTracker::process().allocations(), allocations) << message;
  return message;
}

std::string entry_error(const std::string& entry, const std::string& data) {
  return read_error(make_file("{" + entry + "}", data));
}

TEST(Safetensors, RejectsTruncatedAndOversizedHeaders) {
  EXPECT_TRUE(contains(read_error(""), "shorter than the 8-byte header length"));
  EXPECT_TRUE(contains(read_error("abcde"), "shorter than"));
  uint64_t n = 1000;
  EXPECT_TRUE(contains(read_error(std::string(reinterpret_cast<const char*>(&n), 8) + "{}      "),
                       "runs past the end of the file (16 bytes)"));
  n = uint64_t{1} << 62;
  EXPECT_TRUE(contains(read_error(std::string(reinterpret_cast<const char*>(&n), 8) + "{}      "),
                       "exceeds the 100 MiB limit"));
  // A valid file cut short inside its data section.
  const std::string whole =
      make_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", floats({1, 2, 3, 4}));
  EXPECT_TRUE(contains(read_error(whole.substr(0, whole.size() - 3)),
                       "tensor 'w' has data_offsets [0, 16] outside the data section of 13 bytes"));
}

TEST(Safetensors, RejectsMalformedJson) {
  EXPECT_TRUE(contains(read_error(make_file(R"({"w": )", "")), "header is not valid JSON"));
  EXPECT_TRUE(contains(read_error(make_file("[1, 2]", "")), "not a JSON object"));
  EXPECT_TRUE(contains(read_error(make_file(R"({"a":[[[[[[[[1]]]]]]]]})", "")), "nests deeper"));
  EXPECT_TRUE(contains(entry_error(R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                   R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]})",
                                   floats({1, 2})),
                       "tensor 'w' appears twice"));
  EXPECT_TRUE(contains(entry_error(R"("__metadata__":{"k":1})", ""),
                       "__metadata__ value 'k' is not a string"));
  EXPECT_TRUE(contains(entry_error(R"("w":{"dtype":"F32","shape":[1]})", floats({1})),
                       "tensor 'w' lacks one of dtype, shape, data_offsets"));
}

TEST(Safetensors, RejectsBadDtypesShapesAndOffsets) {
  EXPECT_TRUE(contains(
      entry_error(R"("w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]})", floats({1, 2})),
      "tensor 'w' has dtype \"F64\"; braid reads F32, BF16, F16, I32 and I64"));
  EXPECT_TRUE(contains(
      entry_error(R"("w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]})", floats({1, 2})),
      "tensor 'w' has shape [3] of F32 (12 bytes) but data_offsets [0, 8] span 8 bytes"));
  EXPECT_TRUE(contains(entry_error(R"("w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]})", ""),
                       "tensor 'w' has shape [-1]: dimensions must be non-negative integers"));
  EXPECT_TRUE(contains(entry_error(R"("w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,0]})", ""),
                       "dimensions must be non-negative integers"));
  // 2^62 * 2^62 * 4 wraps to 0 in 64 bits: must be caught, not matched against [0, 0].
  EXPECT_TRUE(contains(
      entry_error(R"("w":{"dtype":"F32","shape":[4611686018427387904,4611686018427387904],)"
                  R"("data_offsets":[0,0]})",
                  ""),
      "tensor 'w' has shape [4611686018427387904, 4611686018427387904] whose size in bytes "
      "overflows"));
  EXPECT_TRUE(
      contains(entry_error(R"("w":{"dtype":"F32","shape":[1,1,1,1,1,1,1],"data_offsets":[0,4]})",
                           floats({1})),
               "tensor 'w' has 7 dimensions"));
  EXPECT_TRUE(contains(
      entry_error(R"("w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]})", floats({1, 2})),
      "tensor 'w' has data_offsets [0, 16] outside the data section of 8 bytes"));
  EXPECT_TRUE(contains(
      entry_error(R"("w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]})", floats({1, 2})),
      "tensor 'w' has data_offsets [8, 4] outside"));
  EXPECT_TRUE(
      contains(entry_error(R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0]})", floats({1})),
               "tensor 'w' has data_offsets [0]; expected [begin, end]"));
  EXPECT_TRUE(contains(entry_error(R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                   R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]})",
                                   floats({1, 2, 3})),
                       "tensors 'a' [0, 8) and 'b' [4, 12) overlap"));
}

TEST(Safetensors, DetectsAFlippedDataByteThroughTheChecksum) {
  TempDir dir;
  const std::string path = dir.file("t.safetensors");
  write_safetensors(path, every_dtype());
  std::string bytes = read_bytes(path);
  bytes[bytes.size() - 5] ^= 0x10;
  EXPECT_TRUE(contains(read_error(bytes), "data checksum mismatch"));
  // A checksum that is not hex is an error too, not a silent skip.
  EXPECT_TRUE(contains(entry_error(R"("__metadata__":{"braid.xxh64":"zz"})", ""),
                       "braid.xxh64 = 'zz' is not 16 hex digits"));
}

TEST(Safetensors, WriterRejectsBadNamesAndReplacesFilesAtomically) {
  TempDir dir;
  const std::string path = dir.file("t.safetensors");
  const Tensor t = random_tensor({2}, DType::f32, 1);
  EXPECT_TRUE(contains(error_of([&] {
                         write_safetensors(path, {{"a", t}, {"a", t}});
                       }),
                       "tensor 'a' given twice"));
  EXPECT_TRUE(contains(error_of([&] {
                         write_safetensors(path, {{"__metadata__", t}});
                       }),
                       "invalid tensor name"));
  EXPECT_TRUE(dir.list().empty());

  write_safetensors(path, {{"a", t}});
  write_safetensors(path, every_dtype());
  EXPECT_EQ(dir.list(), std::vector<std::string>{"t.safetensors"});
  EXPECT_EQ(read_safetensors(path).tensors.size(), every_dtype().size());
  EXPECT_TRUE(contains(error_of([&] { read_safetensors(dir.file("missing.safetensors")); }),
                       "missing.safetensors"));
}

TEST(AtomicFile, UncommittedWritesLeaveNothingBehind) {
  TempDir dir;
  const std::string path = dir.file("f");
  write_file_atomic(path, "old");
  {
    AtomicFile file(path);
    file.write(std::string(1 << 20, 'x'));  // large enough to reach the disk
    EXPECT_EQ(dir.list().size(), 2u);       // the hidden temporary beside "f"
  }
  EXPECT_EQ(dir.list(), std::vector<std::string>{"f"});
  EXPECT_EQ(read_bytes(path), "old");

  AtomicFile file(path);
  file.write("ne");
  file.write(std::string(300000, 'y'));  // mixes gathered and direct writes
  file.write("w");
  const FileDigest digest = file.commit();
  const std::string expected = "ne" + std::string(300000, 'y') + "w";
  EXPECT_EQ(read_bytes(path), expected);
  EXPECT_EQ(digest.bytes, expected.size());
  EXPECT_EQ(digest.xxh64, xxh64(expected.data(), expected.size()));
  EXPECT_EQ(dir.list(), std::vector<std::string>{"f"});
  EXPECT_THROW(write_file_atomic(dir.file("no/such/dir/f"), "x"), IoError);
}

}  // namespace
}  // namespace braid::train
