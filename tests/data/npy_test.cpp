#include "data/npy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "core/error.h"
#include "core/memory.h"
#include "data/sources.h"
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

// Bytes of `v` in numpy's `descr` (widths 1, 2, 4, 8; '>' reverses them). f2 values are
// given as their binary16 bits.
std::string element(const std::string& descr, double v, uint16_t half_bits = 0) {
  const char kind = descr[1];
  const size_t width = static_cast<size_t>(std::stoi(descr.substr(2)));
  std::string b(width, '\0');
  if (kind == 'f' && width == 2) {
    std::memcpy(b.data(), &half_bits, 2);
  } else if (kind == 'f' && width == 4) {
    const float f = static_cast<float>(v);
    std::memcpy(b.data(), &f, 4);
  } else if (kind == 'f') {
    std::memcpy(b.data(), &v, 8);
  } else {
    const auto i = static_cast<int64_t>(v);  // two's complement, little-endian, cut to width
    std::memcpy(b.data(), &i, width);
  }
  if (descr[0] == '>') std::reverse(b.begin(), b.end());
  return b;
}

TEST(Npy, ReadsEveryNumericDtypeInEitherByteOrder) {
  TempDir dir;
  const std::vector<int32_t> labels = {0, 2, 1, 1};
  const std::string lab = dir.file("y.npy");
  write_file(lab, npy_bytes("<i4", "(4,)", raw(labels)));
  // 0, 1, 3 and 100 are exact in every type; -2 in every signed one.
  const std::vector<double> unsigned_values = {0, 1, 3, 100};
  const std::vector<double> signed_values = {0, 1, -2, 100};
  const uint16_t half_bits[] = {0x0000, 0x3C00, 0xC000, 0x5640};  // 0, 1, -2, 100 in binary16
  int files = 0;
  auto check = [&](const std::string& descr, const std::vector<double>& values) {
    SCOPED_TRACE(descr);
    std::string data;
    for (size_t i = 0; i < values.size(); ++i) data += element(descr, values[i], half_bits[i]);
    const std::string x = dir.file("x" + std::to_string(files++) + ".npy");
    write_file(x, npy_bytes(descr, "(4, 1)", data));
    const ArrayDataset d = load_npy_dataset(x, lab, ImageLayout::nchw);
    ASSERT_EQ(d.features.shape(), Shape({4, 1}));
    for (size_t i = 0; i < values.size(); ++i)
      EXPECT_EQ(d.features.f32()[i], static_cast<float>(values[i])) << i;
    const NpyArray a = read_npy(x);  // the bytes as stored, the type as declared
    const char order = descr[2] == '1' ? '|' : descr[0] == '>' ? '>' : '<';  // '=' is '<' here
    EXPECT_EQ(npy_type_descr(a.header.type), order + descr.substr(1));
    EXPECT_EQ(std::string(static_cast<const char*>(a.data.data()), a.data.bytes()), data);
  };
  for (const char* order : {"<", ">"}) {
    const std::string o = order;
    check(o + "f2", signed_values);
    check(o + "f4", signed_values);
    check(o + "f8", signed_values);
    for (const char* w : {"1", "2", "4", "8"}) {
      check(o + "i" + w, signed_values);
      check(o + "u" + w, unsigned_values);
    }
  }
  // '|' (no byte order) and '=' (native, little-endian here) as numpy may spell them.
  check("|u1", unsigned_values);
  check("|i1", signed_values);
  check("=f4", signed_values);
  check("=i2", signed_values);

  // Hand-written bytes, so the reader is not checked against the test's own encoder.
  auto single = [&](const std::string& descr, const std::string& bytes) {
    const std::string x = dir.file("h" + std::to_string(files++) + ".npy");
    write_file(x, npy_bytes(descr, "(1, 1)", bytes));
    write_file(dir.file("y1.npy"), npy_bytes("|u1", "(1,)", std::string(1, '\0')));
    return load_npy_dataset(x, dir.file("y1.npy"), ImageLayout::nchw).features.f32()[0];
  };
  EXPECT_EQ(single(">f4", std::string("\x3F\xC0\x00\x00", 4)), 1.5f);
  EXPECT_EQ(single("<f4", std::string("\x00\x00\xC0\x3F", 4)), 1.5f);
  EXPECT_EQ(single(">f2", std::string("\x3E\x00", 2)), 1.5f);
  EXPECT_EQ(single("<f2", std::string("\x00\x3E", 2)), 1.5f);
  EXPECT_EQ(single(">f8", std::string("\x40\x04\x00\x00\x00\x00\x00\x00", 8)), 2.5f);
  EXPECT_EQ(single(">i2", std::string("\x01\x02", 2)), 258.0f);
  EXPECT_EQ(single("<i2", std::string("\xFE\xFF", 2)), -2.0f);
  EXPECT_EQ(single(">u4", std::string("\x00\x01\x02\x03", 4)), 66051.0f);
  EXPECT_EQ(single(">i8", std::string("\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFD", 8)), -3.0f);
  EXPECT_EQ(single("|u1", std::string("\xFF", 1)), 255.0f);
  EXPECT_EQ(single("|i1", std::string("\xFF", 1)), -1.0f);

  // Bools: numpy writes 0 and 1; any other byte reads as true.
  const std::string xb = dir.file("xb.npy");
  write_file(xb, npy_bytes("|b1", "(4, 1)", std::string("\x00\x01\x01\x02", 4)));
  const ArrayDataset b = load_npy_dataset(xb, lab, ImageLayout::nchw);
  EXPECT_EQ(std::vector<float>(b.features.f32(), b.features.f32() + 4),
            (std::vector<float>{0, 1, 1, 1}));
}

TEST(Npy, LabelsInEveryIntegerAndBoolDtype) {
  TempDir dir;
  const std::string x = dir.file("x.npy");
  write_file(x, npy_bytes("<f4", "(3, 2)", raw(std::vector<float>(6, 0.5f))));
  for (const char* order : {"<", ">"})
    for (const char* kind : {"i", "u"})
      for (const char* w : {"1", "2", "4", "8"}) {
        const std::string descr = std::string(order) + kind + w;
        SCOPED_TRACE(descr);
        std::string data;
        for (const double v : {0.0, 2.0, 1.0}) data += element(descr, v);
        write_file(dir.file("y.npy"), npy_bytes(descr, "(3,)", data));
        const ArrayDataset d = load_npy_dataset(x, dir.file("y.npy"), ImageLayout::nchw);
        EXPECT_EQ(d.labels.data<int32_t>()[1], 2);
        EXPECT_EQ(d.num_classes, 3);
      }
  write_file(dir.file("yb.npy"), npy_bytes("|b1", "(3,)", std::string("\x01\x00\x01", 3)));
  const ArrayDataset d = load_npy_dataset(x, dir.file("yb.npy"), ImageLayout::nchw);
  EXPECT_EQ(d.labels.data<int32_t>()[0], 1);
  EXPECT_EQ(d.num_classes, 2);
  // A u8 label beyond int64 is named, not wrapped to a negative number.
  write_file(dir.file("yu.npy"),
             npy_bytes(">u8", "(3,)",
                       std::string(8, '\0') + std::string(8, '\xFF') + std::string(8, '\0')));
  expect_io_error([&] { load_npy_dataset(x, dir.file("yu.npy"), ImageLayout::nchw); },
                  dir.file("yu.npy") + ": element 1 is 18446744073709551615");
  // Float labels are numeric targets (regression), whatever their width or order.
  for (const char* descr : {"<f2", ">f4", "<f8"}) {
    SCOPED_TRACE(descr);
    std::string data;
    const std::pair<double, uint16_t> values[] = {{0.5, 0x3800}, {-2.0, 0xC000}, {3.25, 0x4280}};
    for (const auto& [v, half] : values) data += element(descr, v, half);
    write_file(dir.file("yf.npy"), npy_bytes(descr, "(3,)", data));
    const ArrayDataset f = load_npy_dataset(x, dir.file("yf.npy"), ImageLayout::nchw);
    ASSERT_TRUE(f.numeric_targets());
    EXPECT_FALSE(f.labels.defined());
    EXPECT_EQ(f.targets.shape(), Shape({3}));
    EXPECT_EQ(f.num_classes, 1);
    EXPECT_EQ(std::vector<float>(f.targets.f32(), f.targets.f32() + 3),
              (std::vector<float>{0.5f, -2.0f, 3.25f}));
  }
}

TEST(Npy, FloatLabelsOfTwoDimensionsAreMultiOutputTargets) {
  TempDir dir;
  const std::string x = dir.file("x.npy");
  write_file(x, npy_bytes("<f4", "(3, 2)", raw(std::vector<float>(6, 0.5f))));
  const std::vector<double> y{0, 1, 1, 1, 0, 0};  // [3, 2]: two labels a sample
  write_file(dir.file("y.npy"), npy_bytes("<f8", "(3, 2)", raw(y)));
  const ArrayDataset d = load_npy_dataset(x, dir.file("y.npy"), ImageLayout::nchw);
  EXPECT_EQ(d.targets.shape(), Shape({3, 2}));
  EXPECT_EQ(d.num_classes, 2);
  const ArraySource source(std::make_shared<ArrayDataset>(d));
  EXPECT_EQ(source.target_dtype(), DType::f32);
  EXPECT_EQ(source.target_shape(), Shape({2}));
  Tensor in = Tensor::empty({2, 2}, DType::f32, MemCategory::data);
  Tensor out = Tensor::empty({2, 2}, DType::f32, MemCategory::data);
  const std::vector<SampleRef> refs{{2, 0}, {1, 1}};
  source.fill(refs, FillContext{}, in, out);
  EXPECT_EQ(std::vector<float>(out.f32(), out.f32() + 4), (std::vector<float>{0, 0, 1, 1}));
  // Integer labels stay [N]; a NaN target is named.
  write_file(dir.file("yi.npy"), npy_bytes("<i4", "(3, 2)", raw(std::vector<int32_t>(6))));
  expect_io_error([&] { load_npy_dataset(x, dir.file("yi.npy"), ImageLayout::nchw); },
                  "got 2 dimensions");
  write_file(dir.file("yn.npy"), npy_bytes("<f4", "(3,)", raw(std::vector<float>{0, NAN, 1})));
  expect_io_error([&] { load_npy_dataset(x, dir.file("yn.npy"), ImageLayout::nchw); },
                  "target 0 of sample 1 is nan");
}

TEST(Npy, Version2HeaderAndFourDimensions) {
  TempDir dir;
  std::vector<float> v(2 * 3 * 2 * 1);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * static_cast<float>(i) - 1;
  write_file(dir.file("x.npy"), npy_bytes("<f4", "(2, 3, 2, 1)", raw(v), 2));
  write_file(dir.file("y.npy"), npy_bytes("<i8", "(2,)", raw(std::vector<int64_t>{4, 1}), 2));
  const ArrayDataset d = load_npy_dataset(dir.file("x.npy"), dir.file("y.npy"), ImageLayout::nhwc);
  EXPECT_EQ(d.features.shape(), Shape({2, 3, 2, 1}));
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(d.features.f32()[i], v[i]);
  EXPECT_EQ(d.num_classes, 5);
}

// [N, C, H, W] files (PyTorch's order) come back as braid's [N, H, W, C].
TEST(Npy, NchwImagesAreTransposedToNhwc) {
  TempDir dir;
  const int64_t n = 2, c = 3, h = 2, w = 4;
  std::vector<float> v(static_cast<size_t>(n * c * h * w));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  write_file(dir.file("x.npy"), npy_bytes("<f4", "(2, 3, 2, 4)", raw(v)));
  write_file(dir.file("y.npy"), npy_bytes("<i8", "(2,)", raw(std::vector<int64_t>{0, 1})));
  const ArrayDataset d = load_npy_dataset(dir.file("x.npy"), dir.file("y.npy"), ImageLayout::nchw);
  ASSERT_EQ(d.features.shape(), Shape({n, h, w, c}));
  for (int64_t s = 0; s < n; ++s)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x)
          EXPECT_EQ(d.features.f32()[((s * h + y) * w + x) * c + ch],
                    v[static_cast<size_t>(((s * c + ch) * h + y) * w + x)]);
  // Features of other ranks are left as stored, whatever the layout says.
  write_file(dir.file("x3.npy"), npy_bytes("<f4", "(2, 3, 2)", raw(std::vector<float>(12, 1))));
  EXPECT_EQ(
      load_npy_dataset(dir.file("x3.npy"), dir.file("y.npy"), ImageLayout::nchw).features.shape(),
      Shape({2, 3, 2}));
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

TEST(Npy, UnsupportedDtypesNameTheFileAndTheDtype) {
  TempDir dir;
  const std::pair<const char*, const char*> refused[] = {
      {"<c8", "complex numbers"},        {">c16", "complex numbers"},
      {"|O", "Python objects"},          {"|S5", "byte strings"},
      {"<U3", "unicode strings"},        {"|V8", "raw or structured records"},
      {"<M8[ns]", "datetimes"},          {"<m8[s]", "timedeltas"},
      {"<f16", "long double floats"},    {"<i3", "an unknown width"},
      {"<f1", "an unknown width"},       {"<b2", "an unknown width"},
      {"f4", "not a numpy type string"}, {"", "not a numpy type string"},
  };
  for (const auto& [descr, what] : refused) {
    SCOPED_TRACE(descr);
    const std::string path = dir.file("bad.npy");
    write_file(path, npy_bytes(descr, "(1, 1)", std::string(8, '\0')));
    expect_io_error([&] { read_npy(path); },
                    path + ": dtype '" + descr + "' is not supported (" + what);
    expect_io_error([&] { read_npy(path); }, "braid reads floats (f2, f4, f8)");
  }
  const std::string path = dir.file("rec.npy");
  std::string dict =
      "{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, "
      "'shape': (1,), }";
  while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  write_file(path, std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(dict.size()) + '\0' +
                       dict + std::string(8, '\0'));
  expect_io_error([&] { read_npy(path); }, path + ": a structured dtype");
}

TEST(Npy, BadLabels) {
  TempDir dir;
  write_file(dir.file("x.npy"), npy_bytes("<f4", "(2, 1)", raw(std::vector<float>(2))));
  write_file(dir.file("yn.npy"), npy_bytes("<i4", "(2,)", raw(std::vector<int32_t>{0, -1})));
  expect_io_error(
      [&] { load_npy_dataset(dir.file("x.npy"), dir.file("yn.npy"), ImageLayout::nchw); },
      "label -1");
  write_file(dir.file("y3.npy"), npy_bytes("<i4", "(3,)", raw(std::vector<int32_t>{0, 0, 0})));
  expect_io_error(
      [&] { load_npy_dataset(dir.file("x.npy"), dir.file("y3.npy"), ImageLayout::nchw); },
      "3 labels");
}

TEST(NpyHeader, ParsesNumpyVariants) {
  NpyHeader h = parse_npy_header("{'descr': '<i8', 'fortran_order': False, 'shape': (5,), }   \n");
  EXPECT_EQ(npy_type_descr(h.type), "<i8");
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
  expect_io_error([&] { load_npy_dataset(x, lab, ImageLayout::nchw); },
                  x + ": sample 2 holds nan (element 1 of its 2)");
  write_file(
      x, npy_bytes("<f4", "(3, 2)",
                   raw(std::vector<float>{0, 1, std::numeric_limits<float>::infinity(), 3, 4, 5})));
  expect_io_error([&] { load_npy_dataset(x, lab, ImageLayout::nchw); },
                  "sample 1 holds inf (element 0");
  write_file(x, npy_bytes("<f8", "(3, 2)", raw(std::vector<double>{0, 1, 2, 3, 1e300, 5})));
  expect_io_error([&] { load_npy_dataset(x, lab, ImageLayout::nchw); }, "sample 2 holds inf");
}

}  // namespace
}  // namespace braid::data
