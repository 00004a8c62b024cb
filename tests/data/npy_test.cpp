#include "data/npy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/memory.h"
#include "data/test_files.h"

namespace braid::data {
namespace {

using testing_util::TempDir;
using testing_util::write_file;

// A .npy file as numpy.save writes it: magic, version, little-endian header length, the
// dict padded with spaces and a newline to a multiple of 64 bytes, then the data.
std::string npy_bytes(const std::string& descr, const std::string& shape, const std::string& data,
                      int version = 1, const std::string& fortran = "False") {
  std::string dict =
      "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
  const size_t prefix = version == 1 ? 10 : 12;
  while ((prefix + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(version);
  out += '\0';
  const uint32_t len = static_cast<uint32_t>(dict.size());
  for (size_t i = 0; i < (version == 1 ? 2u : 4u); ++i)
    out += static_cast<char>((len >> (8 * i)) & 0xFF);
  return out + dict + data;
}

template <typename T>
std::string raw(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
  return s;
}

template <typename Fn>
void expect_io_error(Fn fn, const std::string& fragment) {
  try {
    fn();
    ADD_FAILURE() << "expected an IoError containing '" << fragment << "'";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Npy, RoundTripEveryDtype) {
  TempDir dir;
  const std::vector<double> values = {0, 1, 2, 3, 250, 7};  // representable in every type
  const std::vector<int32_t> labels = {0, 2, 1};
  const std::string lab = dir.file("y.npy");
  write_file(lab, npy_bytes("<i4", "(3,)", raw(labels)));

  auto check = [&](const std::string& descr, const std::string& data) {
    SCOPED_TRACE(descr);
    const std::string x = dir.file("x" + descr.substr(1) + ".npy");
    write_file(x, npy_bytes(descr, "(3, 2)", data));
    const ArrayDataset d = load_npy_dataset(x, lab);
    ASSERT_EQ(d.features.shape(), Shape({3, 2}));
    for (size_t i = 0; i < values.size(); ++i)
      EXPECT_EQ(d.features.f32()[i], static_cast<float>(values[i]));
    for (size_t i = 0; i < labels.size(); ++i) EXPECT_EQ(d.labels.data<int32_t>()[i], labels[i]);
    EXPECT_EQ(d.num_classes, 3);
    const NpyArray a = read_npy(x);
    EXPECT_EQ(npy_type_descr(a.header.type).substr(1), descr.substr(1));
    EXPECT_EQ(a.header.shape, (std::vector<int64_t>{3, 2}));
    EXPECT_EQ(a.data.bytes(), data.size());
    EXPECT_EQ(std::memcmp(a.data.data(), data.data(), data.size()), 0);
  };
  check("<f4", raw(std::vector<float>(values.begin(), values.end())));
  check("<f8", raw(values));
  check("|u1", raw(std::vector<uint8_t>(values.begin(), values.end())));
  check("<i4", raw(std::vector<int32_t>(values.begin(), values.end())));
  check("<i8", raw(std::vector<int64_t>(values.begin(), values.end())));

  // Labels in every integer type.
  const std::string x = dir.file("xf.npy");
  write_file(x, npy_bytes("<f4", "(3, 2)", raw(std::vector<float>(6, 0.5f))));
  for (const auto& [descr, data] : {std::pair{"|u1", raw(std::vector<uint8_t>{0, 2, 1})},
                                    std::pair{"<i8", raw(std::vector<int64_t>{0, 2, 1})}}) {
    write_file(dir.file("yl.npy"), npy_bytes(descr, "(3,)", data));
    const ArrayDataset d = load_npy_dataset(x, dir.file("yl.npy"));
    EXPECT_EQ(d.labels.data<int32_t>()[1], 2) << descr;
  }
}

TEST(Npy, Version2HeaderAndFourDimensions) {
  TempDir dir;
  std::vector<float> v(2 * 3 * 2 * 1);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * static_cast<float>(i) - 1;
  write_file(dir.file("x.npy"), npy_bytes("<f4", "(2, 3, 2, 1)", raw(v), 2));
  write_file(dir.file("y.npy"), npy_bytes("<i8", "(2,)", raw(std::vector<int64_t>{4, 1}), 2));
  const ArrayDataset d = load_npy_dataset(dir.file("x.npy"), dir.file("y.npy"));
  EXPECT_EQ(d.features.shape(), Shape({2, 3, 2, 1}));
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(d.features.f32()[i], v[i]);
  EXPECT_EQ(d.num_classes, 5);
}

TEST(Npy, TruncatedFile) {
  TempDir dir;
  std::string bytes = npy_bytes("<f4", "(4, 4)", raw(std::vector<float>(16)));
  bytes.resize(bytes.size() - 5);
  write_file(dir.file("t.npy"), bytes);
  expect_io_error([&] { read_npy(dir.file("t.npy")); }, "truncated");
  write_file(dir.file("h.npy"), bytes.substr(0, 30));
  expect_io_error([&] { read_npy(dir.file("h.npy")); }, "truncated .npy header");
  write_file(dir.file("e.npy"), "");
  expect_io_error([&] { read_npy(dir.file("e.npy")); }, "truncated");
}

TEST(Npy, BadMagicVersionAndLength) {
  TempDir dir;
  std::string bytes = npy_bytes("<f4", "(1, 1)", raw(std::vector<float>(1)));
  std::string bad = bytes;
  bad[1] = 'X';
  write_file(dir.file("m.npy"), bad);
  expect_io_error([&] { read_npy(dir.file("m.npy")); }, "bad magic");
  bad = bytes;
  bad[6] = 9;
  write_file(dir.file("v.npy"), bad);
  expect_io_error([&] { read_npy(dir.file("v.npy")); }, "version 9.0");
  bad = npy_bytes("<f4", "(1, 1)", raw(std::vector<float>(1)), 2);
  bad[11] = 0x7F;  // header length ~2 GiB
  write_file(dir.file("l.npy"), bad);
  expect_io_error([&] { read_npy(dir.file("l.npy")); }, "header length");
}

TEST(Npy, FortranOrderIsRefused) {
  TempDir dir;
  write_file(dir.file("f.npy"), npy_bytes("<f4", "(2, 2)", raw(std::vector<float>(4)), 1, "True"));
  expect_io_error([&] { read_npy(dir.file("f.npy")); }, "Fortran order");
}

TEST(Npy, OversizedShapeFailsBeforeAllocating) {
  TempDir dir;
  write_file(dir.file("big.npy"), npy_bytes("<f8", "(2147483648, 1048576)", ""));
  write_file(dir.file("ovf.npy"),
             npy_bytes("<f8", "(1125899906842624, 1125899906842624, 1125899906842624)", ""));
  const int64_t before = MemoryTracker::process().allocations();
  expect_io_error([&] { read_npy(dir.file("big.npy")); }, "truncated");
  expect_io_error([&] { read_npy(dir.file("ovf.npy")); }, "overflows");
  EXPECT_EQ(MemoryTracker::process().allocations(), before);
}

TEST(Npy, UnsupportedDtypesAndLabels) {
  TempDir dir;
  write_file(dir.file("b.npy"), npy_bytes(">f4", "(1, 1)", raw(std::vector<float>(1))));
  expect_io_error([&] { read_npy(dir.file("b.npy")); }, "big-endian");
  write_file(dir.file("c.npy"), npy_bytes("<c8", "(1, 1)", std::string(8, '\0')));
  expect_io_error([&] { read_npy(dir.file("c.npy")); }, "'<c8' is not supported");
  write_file(dir.file("x.npy"), npy_bytes("<f4", "(2, 1)", raw(std::vector<float>(2))));
  write_file(dir.file("yf.npy"), npy_bytes("<f4", "(2,)", raw(std::vector<float>(2))));
  expect_io_error([&] { load_npy_dataset(dir.file("x.npy"), dir.file("yf.npy")); }, "integers");
  write_file(dir.file("yn.npy"), npy_bytes("<i4", "(2,)", raw(std::vector<int32_t>{0, -1})));
  expect_io_error([&] { load_npy_dataset(dir.file("x.npy"), dir.file("yn.npy")); }, "label -1");
  write_file(dir.file("y3.npy"), npy_bytes("<i4", "(3,)", raw(std::vector<int32_t>{0, 0, 0})));
  expect_io_error([&] { load_npy_dataset(dir.file("x.npy"), dir.file("y3.npy")); }, "3 labels");
}

TEST(NpyHeader, ParsesNumpyVariants) {
  NpyHeader h = parse_npy_header("{'descr': '<i8', 'fortran_order': False, 'shape': (5,), }   \n");
  EXPECT_EQ(h.type, NpyType::i8);
  EXPECT_EQ(h.shape, (std::vector<int64_t>{5}));
  h = parse_npy_header("{\"shape\": (), \"descr\": \"|u1\", \"fortran_order\": True}");
  EXPECT_TRUE(h.shape.empty());
  EXPECT_TRUE(h.fortran_order);
  EXPECT_EQ(h.numel(), 1);
  h = parse_npy_header("{'descr':'<f4','fortran_order':False,'shape':(2L, 3L)}");
  EXPECT_EQ(h.shape, (std::vector<int64_t>{2, 3}));
}

TEST(NpyHeader, RejectsBadInput) {
  const char* bad[] = {
      "",
      "{",
      "}",
      "{'descr': '<f4', 'fortran_order': False}",                         // missing shape
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}",  // unknown key
      "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}",
      "{'descr': '<f4, 'fortran_order': False, 'shape': (1,)}",
      "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1,2,3,4,5,6,7)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1,) } trailing",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1,,)}",
      "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1",
  };
  for (const char* text : bad) EXPECT_THROW(parse_npy_header(text), Error) << text;
  // Every prefix of a valid header is rejected cleanly (no out-of-bounds reads under ASan).
  const std::string good = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }";
  for (size_t n = 0; n < good.size() - 1; ++n)
    EXPECT_THROW(parse_npy_header(good.substr(0, n)), Error) << good.substr(0, n);
}

// A NaN or Inf in the features is refused at load with the file and the sample named, not
// found steps later as a diverged loss. f8 values beyond float's range become Inf.
TEST(Npy, NonFiniteFeaturesNameTheFileAndSample) {
  TempDir dir;
  const std::string lab = dir.file("y.npy");
  write_file(lab, npy_bytes("<i4", "(3,)", raw(std::vector<int32_t>{0, 1, 2})));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::string x = dir.file("x.npy");
  write_file(x, npy_bytes("<f4", "(3, 2)", raw(std::vector<float>{0, 1, 2, 3, 4, nan})));
  expect_io_error([&] { load_npy_dataset(x, lab); },
                  x + ": sample 2 holds nan (element 1 of its 2)");
  write_file(
      x, npy_bytes("<f4", "(3, 2)",
                   raw(std::vector<float>{0, 1, std::numeric_limits<float>::infinity(), 3, 4, 5})));
  expect_io_error([&] { load_npy_dataset(x, lab); }, "sample 1 holds inf (element 0");
  write_file(x, npy_bytes("<f8", "(3, 2)", raw(std::vector<double>{0, 1, 2, 3, 1e300, 5})));
  expect_io_error([&] { load_npy_dataset(x, lab); }, "sample 2 holds inf");
}

}  // namespace
}  // namespace braid::data
