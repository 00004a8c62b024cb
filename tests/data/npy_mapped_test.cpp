// The mapped .npy source fills the same batches, bit for bit, as the in-memory one
// (load_npy_dataset + ArraySource) for every dtype and both image layouts, over one file
// or several, and refuses damaged files naming them.
#include "data/npy_mapped.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>

#include "core/error.h"
#include "data/npy_files.h"
#include "data/sources.h"
#include "data/test_files.h"

namespace braid::data {
namespace {

using testing_util::npy_file_bytes;
using testing_util::raw_bytes;
using testing_util::TempDir;
using testing_util::write_file;

// `count` random elements of numpy type `descr`, finite where it is a float.
std::string random_elements(const std::string& descr, int64_t count, std::mt19937_64& rng) {
  const char kind = descr[1];
  const size_t width = static_cast<size_t>(std::stoi(descr.substr(2)));
  std::string out;
  std::normal_distribution<double> normal(0.0, 100.0);
  for (int64_t i = 0; i < count; ++i) {
    std::string b(width, '\0');
    if (kind == 'f' && width == 2) {
      uint16_t bits = static_cast<uint16_t>(rng());
      if ((bits & 0x7C00) == 0x7C00) bits &= 0xBFFF;  // not Inf or NaN
      std::memcpy(b.data(), &bits, 2);
    } else if (kind == 'f' && width == 4) {
      const auto f = static_cast<float>(normal(rng));
      std::memcpy(b.data(), &f, 4);
    } else if (kind == 'f') {
      const double d = normal(rng);
      std::memcpy(b.data(), &d, 8);
    } else if (kind == 'b') {
      b[0] = static_cast<char>(rng() & 1);
    } else {
      const uint64_t bits = rng();
      std::memcpy(b.data(), &bits, width);
    }
    if (descr[0] == '>') std::reverse(b.begin(), b.end());
    out += b;
  }
  return out;
}

struct Files {
  std::string x, y;
};

// Features of `descr` and shape (n, ...dims), labels i8 in [0, 5), written to dir/name_{x,y}.
Files write_dataset(const TempDir& dir, const std::string& name, const std::string& descr,
                    int64_t n, const std::vector<int64_t>& dims, std::mt19937_64& rng) {
  int64_t per = 1;
  std::string shape = "(" + std::to_string(n);
  for (const int64_t d : dims) {
    per *= d;
    shape += ", " + std::to_string(d);
  }
  shape += ")";
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (auto& l : labels) l = static_cast<int64_t>(rng() % 5);
  Files f{dir.file(name + "_x.npy"), dir.file(name + "_y.npy")};
  write_file(f.x, npy_file_bytes(descr, shape, random_elements(descr, n * per, rng)));
  write_file(f.y, npy_file_bytes("<i8", "(" + std::to_string(n) + ",)", raw_bytes(labels)));
  return f;
}

struct Filled {
  Tensor inputs, targets;
};

Filled fill_all(const Source& s, const std::vector<SampleRef>& refs, const FillContext& ctx) {
  const auto n = static_cast<int64_t>(refs.size());
  Filled f{Tensor::empty(batch_shape(n, s.input_shape())), Tensor::empty({n}, DType::i32)};
  s.fill(refs, ctx, f.inputs, f.targets);
  return f;
}

void expect_same_bits(const Filled& a, const Filled& b, const std::string& what) {
  ASSERT_EQ(a.inputs.shape(), b.inputs.shape()) << what;
  EXPECT_EQ(std::memcmp(a.inputs.f32(), b.inputs.f32(), a.inputs.numel() * sizeof(float)), 0)
      << what;
  EXPECT_EQ(std::memcmp(a.targets.data<int32_t>(), b.targets.data<int32_t>(),
                        a.targets.numel() * sizeof(int32_t)),
            0)
      << what;
}

// Every sample once, shuffled, at positions that key augmentation.
std::vector<SampleRef> shuffled_refs(int64_t n, std::mt19937_64& rng) {
  std::vector<SampleRef> refs;
  for (int64_t i = 0; i < n; ++i) refs.push_back({i, 3 * i + 1});
  std::shuffle(refs.begin(), refs.end(), rng);
  return refs;
}

const char* const kDescrs[] = {"<f2", ">f2", "<f4", ">f4", "<f8", ">f8", "|i1",
                               "<i2", ">i2", "<i4", ">i4", "<i8", ">i8", "|u1",
                               "<u2", ">u2", "<u4", ">u4", "<u8", ">u8", "|b1"};

TEST(MappedNpy, FillsTheInMemoryBatchesBitwiseForEveryDtypeAndLayout) {
  const TempDir dir;
  std::mt19937_64 rng(7);
  FillContext plain{.seed = 3, .epoch = 1, .augment = {}};
  FillContext augmented{
      .seed = 3, .epoch = 1, .augment = {.flip = true, .crop_pad = 1, .erase = 0.5f}};
  for (const char* descr : kDescrs) {
    for (const ImageLayout layout : {ImageLayout::nchw, ImageLayout::nhwc}) {
      const Files f = write_dataset(dir, "img", descr, 9, {2, 3, 4}, rng);
      const ArraySource memory(
          std::make_shared<const ArrayDataset>(load_npy_dataset(f.x, f.y, layout)));
      const std::vector<SampleRef> refs = shuffled_refs(9, rng);
      for (const bool map : {true, false}) {
        const MappedNpySource mapped({{f.x, f.y}}, {.layout = layout, .map = map, .epoch_size = 0});
        const std::string what = std::string(descr) + " " + std::string(image_layout_name(layout)) +
                                 (map ? " mapped" : " read");
        ASSERT_EQ(mapped.input_shape(), memory.input_shape()) << what;
        ASSERT_EQ(mapped.size(), 9) << what;
        expect_same_bits(fill_all(mapped, refs, plain), fill_all(memory, refs, plain), what);
        expect_same_bits(fill_all(mapped, refs, augmented), fill_all(memory, refs, augmented),
                         what + " augmented");
      }
    }
    // Rows that are not images come out as stored.
    const Files f = write_dataset(dir, "rows", descr, 7, {5}, rng);
    const ArraySource memory(
        std::make_shared<const ArrayDataset>(load_npy_dataset(f.x, f.y, ImageLayout::nchw)));
    const MappedNpySource mapped({{f.x, f.y}}, {});
    const std::vector<SampleRef> refs = shuffled_refs(7, rng);
    expect_same_bits(fill_all(mapped, refs, plain), fill_all(memory, refs, plain), descr);
  }
}

// Three files read as one: sample i of the concatenation is the whole file's sample i.
TEST(MappedNpy, SeveralFilesReadAsTheirConcatenation) {
  const TempDir dir;
  std::mt19937_64 rng(11);
  const Files whole = write_dataset(dir, "whole", "<f4", 9, {3, 2, 2}, rng);
  const NpyArray x = read_npy(whole.x);
  const NpyArray y = read_npy(whole.y);
  const auto* xb = static_cast<const char*>(x.data.data());
  const auto* yb = static_cast<const char*>(y.data.data());
  std::vector<NpyFilePair> parts;
  const int64_t row = 3 * 2 * 2 * 4;
  int64_t first = 0;
  for (const int64_t n : {4, 2, 3}) {
    const std::string k = std::to_string(parts.size());
    parts.push_back({dir.file("part" + k + "_x.npy"), dir.file("part" + k + "_y.npy")});
    write_file(parts.back().features,
               npy_file_bytes("<f4", "(" + std::to_string(n) + ", 3, 2, 2)",
                              std::string(xb + first * row, static_cast<size_t>(n * row))));
    write_file(parts.back().labels, npy_file_bytes("<i8", "(" + std::to_string(n) + ",)",
                                                   std::string(yb + first * 8, n * 8)));
    first += n;
  }
  const MappedNpySource one({{whole.x, whole.y}}, {});
  const MappedNpySource three(parts, {});
  ASSERT_EQ(three.size(), 9);
  const std::vector<SampleRef> refs = shuffled_refs(9, rng);
  expect_same_bits(fill_all(three, refs, {}), fill_all(one, refs, {}), "three files");
  EXPECT_EQ(three.labels(), one.labels());
}

// An epoch longer than the files wraps: sample i is sample i mod samples().
TEST(MappedNpy, AnEpochLongerThanTheFilesWrapsAroundThem) {
  const TempDir dir;
  std::mt19937_64 rng(5);
  const Files f = write_dataset(dir, "d", "|u1", 4, {6}, rng);
  const MappedNpySource wrapped({{f.x, f.y}},
                                {.layout = ImageLayout::nchw, .map = true, .epoch_size = 10});
  EXPECT_EQ(wrapped.size(), 10);
  EXPECT_EQ(wrapped.samples(), 4);
  const Filled a = fill_all(wrapped, {{1, 0}, {5, 1}, {9, 2}}, {});
  for (int r = 1; r < 3; ++r) {
    EXPECT_EQ(std::memcmp(a.inputs.f32(), a.inputs.f32() + r * 6, 6 * sizeof(float)), 0) << r;
    EXPECT_EQ(a.targets.data<int32_t>()[r], a.targets.data<int32_t>()[0]);
  }
  EXPECT_THROW(
      MappedNpySource({{f.x, f.y}}, {.layout = ImageLayout::nchw, .map = true, .epoch_size = 3}),
      Error);
}

template <typename Fn>
void expect_io_error(Fn fn, const std::string& fragment, const std::string& also = "") {
  try {
    fn();
    ADD_FAILURE() << "expected an IoError containing '" << fragment << "'";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    if (!also.empty()) {
      EXPECT_NE(std::string(e.what()).find(also), std::string::npos) << e.what();
    }
  }
}

TEST(MappedNpy, RefusesDamagedOrMismatchedFilesNamingThem) {
  const TempDir dir;
  std::mt19937_64 rng(3);
  const Files good = write_dataset(dir, "good", "<f4", 5, {4}, rng);
  // A file cut short (a copy interrupted): the header declares more than it holds.
  const std::string cut = dir.file("cut_x.npy");
  std::string bytes = testing_util::read_file(good.x);
  write_file(cut, bytes.substr(0, bytes.size() - 1));
  expect_io_error([&] { MappedNpySource({{cut, good.y}}, {}); }, cut, "truncated");
  // Among several files, the bad one is named.
  expect_io_error([&] { MappedNpySource({{good.x, good.y}, {cut, good.y}}, {}); }, cut);
  // A bad magic.
  const std::string junk = dir.file("junk_x.npy");
  write_file(junk, "not numpy at all, just text");
  expect_io_error([&] { MappedNpySource({{junk, good.y}}, {}); }, junk, "magic");
  // Files that disagree on the sample or the dtype.
  const Files wide = write_dataset(dir, "wide", "<f4", 5, {6}, rng);
  expect_io_error(
      [&] {
        MappedNpySource({{good.x, good.y}, {wide.x, wide.y}}, {});
      },
      wide.x, good.x);
  const Files doubles = write_dataset(dir, "doubles", "<f8", 5, {4}, rng);
  expect_io_error(
      [&] {
        MappedNpySource({{good.x, good.y}, {doubles.x, doubles.y}}, {});
      },
      doubles.x, "<f8");
  // Labels of another count.
  const Files fewer = write_dataset(dir, "fewer", "<f4", 3, {4}, rng);
  expect_io_error([&] { MappedNpySource({{good.x, fewer.y}}, {}); }, good.x, fewer.y);
}

// A NaN is found when its row is filled, naming the file and the sample.
TEST(MappedNpy, ANonFiniteFeatureIsAnErrorNamingFileAndSample) {
  const TempDir dir;
  std::vector<float> x(4 * 3, 1.0f);
  x[2 * 3 + 1] = std::numeric_limits<float>::quiet_NaN();
  const std::string px = dir.file("nan_x.npy"), py = dir.file("nan_y.npy");
  write_file(px, npy_file_bytes("<f4", "(4, 3)", raw_bytes(x)));
  write_file(py, npy_file_bytes("<i4", "(4,)", raw_bytes(std::vector<int32_t>{0, 1, 0, 1})));
  const MappedNpySource s({{px, py}}, {});
  EXPECT_NO_THROW(fill_all(s, {{0, 0}, {1, 1}, {3, 2}}, {}));
  expect_io_error([&] { fill_all(s, {{2, 0}}, {}); }, px, "sample 2");
}

}  // namespace
}  // namespace braid::data
