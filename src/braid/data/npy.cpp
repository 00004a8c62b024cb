// .npy reading: header validation, a strict parser for the header's python dict, and
// chunked type conversion so loading never holds two copies of the data.
#include "data/npy.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <type_traits>

#include "core/convert.h"
#include "core/error.h"

namespace braid::data {

static_assert(std::endian::native == std::endian::little,
              "the .npy reader assumes little-endian ('=' and '|' are read as '<')");

size_t npy_type_size(NpyType t) { return t.size; }

std::string npy_type_descr(NpyType t) {
  std::string d(1, t.size == 1 ? '|' : t.big_endian ? '>' : '<');
  switch (t.kind) {
    case NpyType::Kind::floating:
      d += 'f';
      break;
    case NpyType::Kind::signed_int:
      d += 'i';
      break;
    case NpyType::Kind::unsigned_int:
      d += 'u';
      break;
    case NpyType::Kind::boolean:
      d += 'b';
      break;
  }
  return d + std::to_string(t.size);
}

int64_t NpyHeader::numel() const {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

namespace {

constexpr const char* kSupported =
    "braid reads floats (f2, f4, f8), integers (i1, i2, i4, i8, u1, u2, u4, u8) and bools (b1), "
    "little- or big-endian";

// What a numpy type character that braid does not read holds, for the error.
const char* unsupported_kind(char c) {
  switch (c) {
    case 'c':
      return "complex numbers";
    case 'O':
      return "Python objects";
    case 'S':
    case 'a':
      return "byte strings";
    case 'U':
      return "unicode strings";
    case 'V':
      return "raw or structured records";
    case 'M':
      return "datetimes";
    case 'm':
      return "timedeltas";
    default:
      return "an unknown type";
  }
}

// Recursive-descent parser for the subset of python literals numpy writes: a dict of
// string keys to strings, True/False, and tuples of non-negative integers.
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view s) : s_(s) {}

  NpyHeader parse() {
    NpyHeader h;
    bool has_descr = false, has_order = false, has_shape = false;
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') break;
      const std::string key = parse_string();
      expect(':');
      skip_space();
      if (key == "descr") {
        check_unique(has_descr, key);
        if (peek() == '[')
          BRAID_THROW(Error, "a structured dtype (a list of named fields) is not supported; ",
                      kSupported, ": save each field as its own array");
        h.type = parse_descr(parse_string());
      } else if (key == "fortran_order") {
        check_unique(has_order, key);
        h.fortran_order = parse_bool();
      } else if (key == "shape") {
        check_unique(has_shape, key);
        h.shape = parse_shape();
      } else {
        fail("unexpected key '" + key + "'");
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') fail("expected ',' or '}'");
    }
    ++pos_;
    skip_space();
    if (pos_ != s_.size()) fail("unexpected text after the closing '}'");
    if (!has_descr || !has_order || !has_shape)
      fail("missing key '" +
           std::string(!has_descr   ? "descr"
                       : !has_order ? "fortran_order"
                                    : "shape") +
           "'");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    BRAID_THROW(Error, "bad .npy header at character ", pos_, ": ", what);
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r'))
      ++pos_;
  }
  void expect(char c) {
    skip_space();
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  void check_unique(bool& seen, const std::string& key) const {
    if (seen) fail("duplicate key '" + key + "'");
    seen = true;
  }
  std::string parse_string() {
    skip_space();
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail("expected a quoted string");
    const size_t end = s_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string out(s_.substr(pos_ + 1, end - pos_ - 1));
    if (out.find('\\') != std::string::npos) fail("escapes in strings are not supported");
    pos_ = end + 1;
    return out;
  }
  bool parse_bool() {
    if (s_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (s_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    fail("expected True or False");
  }
  int64_t parse_int() {
    skip_space();
    if (peek() < '0' || peek() > '9') fail("expected a non-negative integer");
    int64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      if (v > (int64_t{1} << 50)) fail("dimension too large");
      v = v * 10 + (peek() - '0');
      ++pos_;
    }
    if (peek() == 'L') ++pos_;  // python 2 long literal
    return v;
  }
  std::vector<int64_t> parse_shape() {
    expect('(');
    std::vector<int64_t> dims;
    skip_space();
    if (peek() == ')') {
      ++pos_;
      return dims;
    }
    while (true) {
      if (dims.size() >= static_cast<size_t>(Shape::kMaxDims))
        fail("more than " + std::to_string(Shape::kMaxDims) + " dimensions");
      dims.push_back(parse_int());
      skip_space();
      if (peek() == ',') {
        ++pos_;
        skip_space();
        if (peek() == ')') break;
        continue;
      }
      if (peek() == ')') break;
      fail("expected ',' or ')' in shape");
    }
    ++pos_;
    return dims;
  }
  // numpy's dtype.str: a byte order ('<', '>', '|' or '='), a type character and a width.
  static NpyType parse_descr(const std::string& d) {
    auto refuse = [&](const char* what) -> NpyType {
      BRAID_THROW(Error, "dtype '", d, "' is not supported (", what, "); ", kSupported,
                  ": convert it, e.g. np.save(path, arr.astype('<f4'))");
    };
    if (d.size() < 2 || std::string_view("<>|=").find(d[0]) == std::string_view::npos)
      refuse("not a numpy type string");
    const char c = d[1];
    const std::string width = d.substr(2);
    NpyType t;
    t.big_endian = d[0] == '>';
    if (c == 'f') {
      t.kind = NpyType::Kind::floating;
    } else if (c == 'i') {
      t.kind = NpyType::Kind::signed_int;
    } else if (c == 'u') {
      t.kind = NpyType::Kind::unsigned_int;
    } else if (c == 'b' || c == '?') {
      t.kind = NpyType::Kind::boolean;
    } else {
      refuse(unsupported_kind(c));
    }
    const bool is_float = t.kind == NpyType::Kind::floating;
    if (width == "1" && !is_float) {
      t.size = 1;
    } else if (width == "2" || width == "4" || width == "8") {
      t.size = static_cast<uint8_t>(width[0] - '0');
    } else if (t.kind == NpyType::Kind::boolean && width.empty()) {
      t.size = 1;
    } else {
      refuse(is_float && (width == "12" || width == "16") ? "long double floats"
                                                          : "an unknown width");
    }
    if (t.kind == NpyType::Kind::boolean && t.size != 1) refuse("an unknown width");
    if (t.size == 1) t.big_endian = false;
    return t;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

// The element at `src` as its unsigned bits in this machine's order.
template <typename Bits>
Bits load(NpyType type, const unsigned char* src) {
  Bits b;
  std::memcpy(&b, src, sizeof b);
  if (type.big_endian) {
    if constexpr (sizeof(Bits) == 2) b = __builtin_bswap16(b);
    if constexpr (sizeof(Bits) == 4) b = __builtin_bswap32(b);
    if constexpr (sizeof(Bits) == 8) b = __builtin_bswap64(b);
  }
  return b;
}

// `count` elements converted to Out; `first` is the first one's index in the file.
// `count` elements of type `t` converted to Out; `first` is the first one's index in the
// file at `path` (for the error of a u8 value beyond int64).
template <typename Out>
void convert_elements(NpyType t, const std::string& path, const unsigned char* src, uint64_t count,
                      uint64_t first, Out* dst) {
  auto run = [&](auto tag, auto bits_tag) {
    using In = decltype(tag);
    using Bits = decltype(bits_tag);
    for (uint64_t i = 0; i < count; ++i) {
      const In v = std::bit_cast<In>(load<Bits>(t, src + i * sizeof(In)));
      if constexpr (std::is_same_v<In, uint64_t> && std::is_same_v<Out, int64_t>)
        if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          BRAID_THROW(IoError, path, ": element ", first + i, " is ", v,
                      ", beyond the int64 range");
      dst[i] = static_cast<Out>(v);
    }
  };
  switch (t.kind) {
    case NpyType::Kind::floating:
      if (t.size == 2) {
        for (uint64_t i = 0; i < count; ++i)
          dst[i] = static_cast<Out>(half_to_float(Half{load<uint16_t>(t, src + 2 * i)}));
      } else if (t.size == 4) {
        run(float{}, uint32_t{});
      } else {
        run(double{}, uint64_t{});
      }
      break;
    case NpyType::Kind::signed_int:
      if (t.size == 1) run(int8_t{}, uint8_t{});
      if (t.size == 2) run(int16_t{}, uint16_t{});
      if (t.size == 4) run(int32_t{}, uint32_t{});
      if (t.size == 8) run(int64_t{}, uint64_t{});
      break;
    case NpyType::Kind::unsigned_int:
      if (t.size == 1) run(uint8_t{}, uint8_t{});
      if (t.size == 2) run(uint16_t{}, uint16_t{});
      if (t.size == 4) run(uint32_t{}, uint32_t{});
      if (t.size == 8) run(uint64_t{}, uint64_t{});
      break;
    case NpyType::Kind::boolean:
      for (uint64_t i = 0; i < count; ++i) dst[i] = static_cast<Out>(src[i] != 0 ? 1 : 0);
      break;
  }
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// An open .npy file positioned at its data, with the header validated against the size.
struct NpyReader {
  std::string path;
  std::unique_ptr<std::FILE, FileCloser> file;
  NpyHeader header;
  uint64_t data_offset = 0;  // prefix and header: where the data starts
  uint64_t data_bytes = 0;

  explicit NpyReader(const std::string& p) : path(p) {
    file.reset(std::fopen(p.c_str(), "rb"));
    if (!file) {
      const int err = errno;
      BRAID_THROW(IoError, p, ": cannot open (", std::strerror(err), ")");
    }
    std::error_code ec;
    const uint64_t file_size = std::filesystem::file_size(p, ec);
    if (ec) BRAID_THROW(IoError, p, ": cannot read its size (", ec.message(), ")");

    unsigned char pre[8];
    if (read(pre, 8) < 8)
      BRAID_THROW(IoError, p, ": truncated .npy header (", file_size, " bytes)");
    if (std::memcmp(pre, "\x93NUMPY", 6) != 0)
      BRAID_THROW(IoError, p, ": not a .npy file (bad magic); write it with numpy.save");
    const int major = pre[6], minor = pre[7];
    uint64_t header_len = 0, prefix = 0;
    if (major == 1) {
      unsigned char len[2];
      if (read(len, 2) < 2) BRAID_THROW(IoError, p, ": truncated .npy header");
      header_len = len[0] | (uint64_t{len[1]} << 8);
      prefix = 10;
    } else if (major == 2 || major == 3) {
      unsigned char len[4];
      if (read(len, 4) < 4) BRAID_THROW(IoError, p, ": truncated .npy header");
      header_len =
          len[0] | (uint64_t{len[1]} << 8) | (uint64_t{len[2]} << 16) | (uint64_t{len[3]} << 24);
      prefix = 12;
    } else {
      BRAID_THROW(IoError, p, ": .npy format version ", major, ".", minor,
                  " is not supported; braid reads versions 1.0, 2.0 and 3.0");
    }
    if (header_len > kNpyMaxHeaderBytes)
      BRAID_THROW(IoError, p, ": .npy header length ", header_len, " exceeds the ",
                  kNpyMaxHeaderBytes, "-byte limit; the file is corrupt");
    std::string text(header_len, '\0');
    if (read(text.data(), header_len) < header_len)
      BRAID_THROW(IoError, p, ": truncated .npy header: expected ", header_len, " bytes");
    try {
      header = parse_npy_header(text);
    } catch (const Error& e) {
      BRAID_THROW(IoError, p, ": ", e.what());
    }
    if (header.fortran_order)
      BRAID_THROW(IoError, p,
                  ": array is stored in Fortran order; save a C-ordered copy "
                  "(np.save(path, np.ascontiguousarray(arr)))");
    uint64_t n = 1;
    for (const int64_t d : header.shape)
      if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n))
        BRAID_THROW(IoError, p, ": .npy shape overflows; the header is corrupt");
    if (__builtin_mul_overflow(n, npy_type_size(header.type), &data_bytes))
      BRAID_THROW(IoError, p, ": .npy shape overflows; the header is corrupt");
    const uint64_t header_bytes = prefix + header_len;
    data_offset = header_bytes;
    if (data_bytes > file_size || file_size - data_bytes < header_bytes)
      BRAID_THROW(IoError, p, ": truncated: the header declares ", data_bytes,
                  " data bytes after a ", header_bytes, "-byte header, but the file has ",
                  file_size, " bytes");
    if (file_size - data_bytes > header_bytes)
      BRAID_THROW(IoError, p, ": ", file_size - data_bytes - header_bytes,
                  " bytes after the data the header declares; the file is corrupt");
  }

  uint64_t read(void* dst, uint64_t n) { return std::fread(dst, 1, n, file.get()); }

  void read_exact(void* dst, uint64_t n) {
    const uint64_t got = read(dst, n);
    if (got < n) BRAID_THROW(IoError, path, ": read failed (file changed while reading?)");
  }

  // Reads all elements converted to Out, a chunk at a time, so loading never holds two
  // copies of the data; the file's own little-endian f4 (i8) lands in a float (int64)
  // destination directly.
  template <typename Out>
  void read_converted(Out* dst) {
    const size_t item = npy_type_size(header.type);
    const bool native = !header.type.big_endian || item == 1;
    if (native && ((std::is_same_v<Out, float> && header.type == f4()) ||
                   (std::is_same_v<Out, int64_t> && header.type == i8()))) {
      read_exact(dst, data_bytes);
      return;
    }
    std::vector<unsigned char> chunk(std::min<uint64_t>(data_bytes, 1 << 20));
    const uint64_t per_chunk = chunk.size() / item;
    for (uint64_t done = 0, total = data_bytes / item; done < total;) {
      const uint64_t count = std::min(per_chunk, total - done);
      read_exact(chunk.data(), count * item);
      convert(chunk.data(), count, done, dst + done);
      done += count;
    }
  }

  static NpyType f4() { return {NpyType::Kind::floating, 4, false}; }
  static NpyType i8() { return {NpyType::Kind::signed_int, 8, false}; }

  template <typename Out>
  void convert(const unsigned char* src, uint64_t count, uint64_t first, Out* dst) const {
    convert_elements(header.type, path, src, count, first, dst);
  }
};

}  // namespace

NpyHeader parse_npy_header(std::string_view text) { return HeaderParser(text).parse(); }

NpyArray read_npy(const std::string& path) {
  NpyReader in(path);
  NpyArray out;
  out.header = in.header;
  out.data = Buffer(in.data_bytes, MemCategory::data);
  in.read_exact(out.data.data(), in.data_bytes);
  return out;
}

ImageLayout parse_image_layout(std::string_view name) {
  if (name == "nchw") return ImageLayout::nchw;
  if (name == "nhwc") return ImageLayout::nhwc;
  BRAID_THROW(Error, "image layout '", name, "': expected nchw or nhwc");
}

std::string_view image_layout_name(ImageLayout layout) {
  return layout == ImageLayout::nchw ? "nchw" : "nhwc";
}

namespace {

// Each sample [C, H, W] becomes [H, W, C] in place, through one sample of scratch.
void nchw_to_nhwc(Tensor& x) {
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
  const int64_t hw = h * w, per_sample = c * hw;
  std::vector<float> sample(static_cast<size_t>(per_sample));
  float* data = x.f32();
  for (int64_t i = 0; i < n; ++i) {
    float* s = data + i * per_sample;
    std::memcpy(sample.data(), s, static_cast<size_t>(per_sample) * sizeof(float));
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < hw; ++p) s[p * c + ch] = sample[static_cast<size_t>(ch * hw + p)];
  }
  x = x.reshape(Shape{n, h, w, c});
}

}  // namespace

namespace {

// Labels [n] of an integer or bool type as i32 class indices (the features' file named in
// a count mismatch).
NpyLabels read_labels(NpyReader& fy, int64_t n, const std::string& features_path) {
  const std::string& labels_path = fy.path;
  if (fy.header.shape.size() != 1)
    BRAID_THROW(IoError, labels_path, ": labels must be 1-dimensional [N], got ",
                fy.header.shape.size(), " dimensions");
  if (fy.header.shape[0] != n)
    BRAID_THROW(IoError, features_path, " holds ", n, " samples but ", labels_path, " holds ",
                fy.header.shape[0], " labels");
  if (fy.header.type.is_float())
    BRAID_THROW(IoError, labels_path, ": labels must be integers (class indices), got ",
                npy_type_descr(fy.header.type),
                "; save them with labels.astype('int64') (numeric targets for a regression or "
                "multi-label loss are read with npy_mmap off and without npy_shards)");
  std::vector<int64_t> raw(static_cast<size_t>(n));
  fy.read_converted(raw.data());
  NpyLabels out;
  out.labels = Tensor::empty({n}, DType::i32, MemCategory::data);
  int32_t* labels = out.labels.data<int32_t>();
  int64_t max_label = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (raw[i] < 0 || raw[i] >= INT32_MAX)
      BRAID_THROW(IoError, labels_path, ": label ", raw[i], " at index ", i,
                  " is not a class index in [0, 2^31 - 1)");
    labels[i] = static_cast<int32_t>(raw[i]);
    max_label = std::max(max_label, raw[i]);
  }
  out.num_classes = static_cast<int32_t>(max_label + 1);
  return out;
}

}  // namespace

NpyFileLayout read_npy_layout(const std::string& path) {
  const NpyReader in(path);
  return NpyFileLayout{in.header, in.data_offset, in.data_bytes};
}

void check_npy_features(const std::string& path, const NpyHeader& header) {
  if (header.shape.size() < 2)
    BRAID_THROW(IoError, path, ": features must be [N, ...] with at least 2 dimensions, got ",
                header.shape.size());
}

void npy_to_f32(NpyType type, const unsigned char* src, uint64_t count, float* dst) {
  convert_elements(type, std::string(), src, count, 0, dst);
}

NpyLabels read_npy_labels(const std::string& labels_path, int64_t n,
                          const std::string& features_path) {
  NpyReader fy(labels_path);
  return read_labels(fy, n, features_path);
}

ArrayDataset load_npy_dataset(const std::string& features_path, const std::string& labels_path,
                              ImageLayout layout) {
  NpyReader fx(features_path);
  NpyReader fy(labels_path);
  const auto& fs = fx.header.shape;
  check_npy_features(features_path, fx.header);
  // Float labels are numeric targets (regression, multi-label): [N] or [N, K]. Checked before
  // the features are read, so a wrong file fails at once.
  const bool numeric = fy.header.type.is_float();
  const size_t label_dims = fy.header.shape.size();
  if (numeric && label_dims != 1 && label_dims != 2)
    BRAID_THROW(IoError, labels_path, ": numeric targets must be [N] or [N, K]; got ", label_dims,
                " dimensions");
  if (numeric && fy.header.shape[0] != fs[0])
    BRAID_THROW(IoError, features_path, " holds ", fs[0], " samples but ", labels_path, " holds ",
                fy.header.shape[0], " targets");

  ArrayDataset d;
  d.features = Tensor::empty(Shape(fs), DType::f32, MemCategory::data);
  fx.read_converted(d.features.f32());
  // A NaN or Inf in the inputs would surface steps later as a diverged loss blamed on the
  // learning rate: name the file and sample here instead.
  const float* x = d.features.f32();
  const int64_t total = d.features.numel();
  const int64_t per_sample = fs[0] > 0 ? total / fs[0] : 0;
  for (int64_t i = 0; i < total; ++i)
    if (!std::isfinite(x[i]))
      BRAID_THROW(IoError, features_path, ": sample ", i / per_sample, " holds ", x[i],
                  " (element ", i % per_sample, " of its ", per_sample,
                  "); features must be finite: clean or drop that sample (np.isfinite)");

  if (fs.size() == 4 && layout == ImageLayout::nchw) nchw_to_nhwc(d.features);

  if (numeric) {
    d.targets = Tensor::empty(Shape(fy.header.shape), DType::f32, MemCategory::data);
    fy.read_converted(d.targets.f32());
    const float* t = d.targets.f32();
    const int64_t k = label_dims == 2 ? fy.header.shape[1] : 1;
    for (int64_t i = 0; i < d.targets.numel(); ++i)
      if (!std::isfinite(t[i]))
        BRAID_THROW(IoError, labels_path, ": target ", i % k, " of sample ", i / k, " is ", t[i],
                    "; numeric targets must be finite");
    d.num_classes = static_cast<int32_t>(k);
    return d;
  }
  NpyLabels labels = read_labels(fy, fs[0], features_path);
  d.labels = std::move(labels.labels);
  d.num_classes = labels.num_classes;
  return d;
}

}  // namespace braid::data
