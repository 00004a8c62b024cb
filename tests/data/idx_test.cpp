#include "data/idx.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/memory.h"
#include "data/fashion_mnist.h"
#include "data/test_files.h"

namespace braid::data {
namespace {

using testing_util::TempDir;
using testing_util::write_file;
using testing_util::write_gz;

std::string idx_header(uint8_t type, std::vector<uint32_t> dims) {
  std::string h{'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (const uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) h += static_cast<char>((d >> shift) & 0xFF);
  return h;
}

std::string idx_file(std::vector<uint32_t> dims, uint8_t first_value = 0) {
  std::string f = idx_header(0x08, dims);
  uint64_t n = 1;
  for (const uint32_t d : dims) n *= d;
  for (uint64_t i = 0; i < n; ++i) f += static_cast<char>(first_value + i);
  return f;
}

// Runs fn, expects an IoError whose message contains every fragment.
template <typename Fn>
void expect_io_error(Fn fn, std::vector<std::string> fragments) {
  try {
    fn();
    ADD_FAILURE() << "expected an IoError";
  } catch (const IoError& e) {
    for (const auto& f : fragments)
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
}

TEST(Idx, ReadsPlainAndGzipped) {
  TempDir dir;
  const std::string bytes = idx_file({2, 3, 4}, 7);
  write_file(dir.file("a.idx"), bytes);
  write_gz(dir.file("a.idx.gz"), bytes);
  for (const std::string name : {"a.idx", "a.idx.gz"}) {
    const IdxArray a = read_idx(dir.file(name));
    EXPECT_EQ(a.dims, (std::vector<int64_t>{2, 3, 4}));
    ASSERT_EQ(a.numel(), 24);
    for (int i = 0; i < 24; ++i) EXPECT_EQ(a.bytes()[i], 7 + i);
  }
}

TEST(Idx, TruncatedDataNamesFileAndLengths) {
  TempDir dir;
  std::string bytes = idx_file({10, 5});
  bytes.resize(bytes.size() - 3);
  write_file(dir.file("t.idx"), bytes);
  write_gz(dir.file("t.idx.gz"), bytes);
  expect_io_error([&] { read_idx(dir.file("t.idx"), "install it"); },
                  {"t.idx", "truncated", "50", "47", "install it"});
  expect_io_error([&] { read_idx(dir.file("t.idx.gz")); }, {"t.idx.gz", "truncated", "50", "47"});
}

TEST(Idx, TruncatedGzipStream) {
  TempDir dir;
  write_gz(dir.file("full.gz"), idx_file({100, 100}));
  std::string gz = testing_util::read_file(dir.file("full.gz"));
  gz.resize(gz.size() / 2);
  write_file(dir.file("cut.gz"), gz);
  EXPECT_THROW(read_idx(dir.file("cut.gz")), IoError);
}

TEST(Idx, TruncatedHeader) {
  TempDir dir;
  write_file(dir.file("h"), idx_header(0x08, {5, 5}).substr(0, 6));
  expect_io_error([&] { read_idx(dir.file("h")); }, {"truncated IDX header"});
  write_file(dir.file("empty"), "");
  expect_io_error([&] { read_idx(dir.file("empty")); }, {"truncated IDX header"});
}

TEST(Idx, CorruptMagic) {
  TempDir dir;
  std::string bytes = idx_file({4});
  bytes[0] = 0x1F;
  write_file(dir.file("m"), bytes);
  expect_io_error([&] { read_idx(dir.file("m")); }, {"not an IDX file"});
}

TEST(Idx, WrongTypeByte) {
  TempDir dir;
  std::string bytes = idx_header(0x0D, {4}) + std::string(16, '\0');
  write_file(dir.file("f"), bytes);
  expect_io_error([&] { read_idx(dir.file("f")); }, {"float32", "not supported"});
  write_file(dir.file("g"), idx_header(0x42, {4}) + std::string(4, '\0'));
  expect_io_error([&] { read_idx(dir.file("g")); }, {"unknown element type"});
}

TEST(Idx, BadDimensionCount) {
  TempDir dir;
  write_file(dir.file("z"), idx_header(0x08, {}));
  expect_io_error([&] { read_idx(dir.file("z")); }, {"0 dimensions"});
  write_file(dir.file("five"), idx_file({1, 1, 1, 1, 1}));
  expect_io_error([&] { read_idx(dir.file("five")); }, {"5 dimensions"});
}

TEST(Idx, OversizedHeaderFailsBeforeAllocating) {
  TempDir dir;
  write_file(dir.file("huge"), idx_header(0x08, {1u << 31, 1u << 31, 28, 28}));
  const int64_t before = MemoryTracker::process().allocations();
  expect_io_error([&] { read_idx(dir.file("huge")); },
                  {"huge", "limit", "2147483648 x 2147483648"});
  EXPECT_EQ(MemoryTracker::process().allocations(), before);
  // Under the limit but far larger than a plain file: refused from the file size.
  write_file(dir.file("short"), idx_header(0x08, {60000, 28, 28}) + "abc");
  expect_io_error([&] { read_idx(dir.file("short")); }, {"truncated", "47040000", "holds 3"});
  EXPECT_EQ(MemoryTracker::process().allocations(), before);
  // Just over a small limit is refused too.
  write_file(dir.file("small"), idx_file({10, 10}));
  EXPECT_THROW(read_idx(dir.file("small"), "", 99), IoError);
  EXPECT_NO_THROW(read_idx(dir.file("small"), "", 100));
}

TEST(Idx, TrailingBytesAreAnError) {
  TempDir dir;
  write_file(dir.file("x"), idx_file({3}) + "junk");
  expect_io_error([&] { read_idx(dir.file("x")); }, {"more data"});
}

TEST(Idx, MissingFile) {
  expect_io_error([] { read_idx("/nonexistent/braid/file.gz", "install something"); },
                  {"/nonexistent/braid/file.gz", "cannot open", "install something"});
}

TEST(IdxImages, CountMismatchAndBadLabels) {
  TempDir dir;
  write_file(dir.file("img"), idx_file({3, 2, 2}));
  write_file(dir.file("lab2"), idx_header(0x08, {2}) + std::string{1, 2});
  expect_io_error([&] { load_idx_images(dir.file("img"), dir.file("lab2"), 10); },
                  {"3 images", "2 labels"});
  write_file(dir.file("lab_bad"), idx_header(0x08, {3}) + std::string{1, 10, 2});
  expect_io_error([&] { load_idx_images(dir.file("img"), dir.file("lab_bad"), 10); },
                  {"label 10", "index 1"});
  write_file(dir.file("lab"), idx_header(0x08, {3}) + std::string{1, 9, 0});
  const ImageDataset d = load_idx_images(dir.file("img"), dir.file("lab"), 10);
  EXPECT_EQ(d.n, 3);
  EXPECT_EQ(d.h, 2);
  EXPECT_EQ(d.w, 2);
  EXPECT_EQ(d.c, 1);
  EXPECT_EQ(d.label_data()[1], 9);
  EXPECT_EQ(d.image(2)[3], 11);
}

TEST(FashionMnist, MissingDirectorySaysWhatToInstall) {
  expect_io_error([] { load_fashion_mnist("/nonexistent/fashion"); },
                  {"dataset-fashion-mnist", "train-images-idx3-ubyte.gz"});
}

TEST(FashionMnist, RealFiles) {
  if (!std::filesystem::exists(std::string(kFashionMnistDir) + "/train-labels-idx1-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST not installed at " << kFashionMnistDir
                 << " (apt-get install dataset-fashion-mnist)";
  const ImageDataset train = load_fashion_mnist(kFashionMnistDir, Split::train);
  const ImageDataset test = load_fashion_mnist(kFashionMnistDir, Split::test);
  EXPECT_EQ(train.n, 60000);
  EXPECT_EQ(test.n, 10000);
  for (const ImageDataset* d : {&train, &test}) {
    EXPECT_EQ(d->h, 28);
    EXPECT_EQ(d->w, 28);
    EXPECT_EQ(d->c, 1);
    std::vector<int64_t> counts(10);
    for (int64_t i = 0; i < d->n; ++i) {
      ASSERT_LT(d->label_data()[i], 10);
      ++counts[static_cast<size_t>(d->label_data()[i])];
    }
    for (const int64_t c : counts) EXPECT_EQ(c, d->n / 10);  // the classes are balanced
  }
  EXPECT_EQ(train.label_data()[0], 9);  // an ankle boot
  EXPECT_EQ(test.label_data()[0], 9);
}

}  // namespace
}  // namespace braid::data
