// IDX reading through zlib's gz* functions, which also read uncompressed files
// transparently, so one code path serves both.
#include "data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace braid::data {
namespace {

std::string with_hint(const std::string& hint) { return hint.empty() ? "" : "; " + hint; }

std::string type_name(uint8_t t) {
  switch (t) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "int16";
    case 0x0C:
      return "int32";
    case 0x0D:
      return "float32";
    case 0x0E:
      return "float64";
  }
  return "";
}

// Owns a gzFile and reads exactly n bytes or reports how many it got.
class GzReader {
 public:
  GzReader(const std::string& path, const std::string& hint) : path_(path) {
    file_ = gzopen(path.c_str(), "rb");
    if (!file_) {
      const int err = errno;
      BRAID_THROW(IoError, path, ": cannot open (", err ? std::strerror(err) : "out of memory", ")",
                  with_hint(hint));
    }
  }
  ~GzReader() { gzclose(file_); }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to n bytes; returns the number read. A corrupt stream is an error; a short
  // one (end of file) is the caller's to report.
  uint64_t read(void* dst, uint64_t n) {
    uint64_t got = 0;
    auto* out = static_cast<unsigned char*>(dst);
    while (got < n) {
      const auto chunk = static_cast<unsigned>(std::min<uint64_t>(n - got, uint64_t{1} << 30));
      const int r = gzread(file_, out + got, chunk);
      if (r < 0) {
        int code = 0;
        const char* msg = gzerror(file_, &code);
        BRAID_THROW(IoError, path_, ": read failed after ", got, " bytes (", msg,
                    "); the file is corrupt, download or reinstall it");
      }
      if (r == 0) break;
      got += static_cast<uint64_t>(r);
    }
    return got;
  }

  // True for a plain (not gzipped) file, whose size then bounds the data.
  bool direct() { return gzdirect(file_) != 0; }

  // zlib reports a truncated gzip stream as Z_BUF_ERROR once input runs out.
  bool truncated_stream() {
    int code = Z_OK;
    gzerror(file_, &code);
    return code == Z_BUF_ERROR;
  }

 private:
  std::string path_;
  gzFile file_ = nullptr;
};

}  // namespace

int64_t IdxArray::numel() const {
  int64_t n = 1;
  for (const int64_t d : dims) n *= d;
  return n;
}

IdxArray read_idx(const std::string& path, const std::string& hint, uint64_t max_bytes) {
  GzReader in(path, hint);
  unsigned char magic[4];
  const uint64_t got_magic = in.read(magic, 4);
  if (got_magic < 4)
    BRAID_THROW(IoError, path, ": truncated IDX header: expected 4 magic bytes, got ", got_magic,
                with_hint(hint));
  if (magic[0] != 0 || magic[1] != 0)
    BRAID_THROW(IoError, path, ": not an IDX file (magic bytes ", int{magic[0]}, " ", int{magic[1]},
                ", expected 0 0)", with_hint(hint));
  const uint8_t type = magic[2];
  if (type != 0x08) {
    const std::string name = type_name(type);
    if (name.empty())
      BRAID_THROW(IoError, path, ": not an IDX file (unknown element type byte 0x", std::hex,
                  int{type}, ")", with_hint(hint));
    BRAID_THROW(IoError, path, ": IDX element type ", name,
                " is not supported; braid reads unsigned-byte (0x08) IDX files");
  }
  const int ndims = magic[3];
  if (ndims < 1 || ndims > 4)
    BRAID_THROW(IoError, path, ": IDX header declares ", ndims, " dimensions; braid reads 1 to 4",
                with_hint(hint));

  unsigned char raw_dims[16];
  const uint64_t dim_bytes = 4 * static_cast<uint64_t>(ndims);
  const uint64_t got_dims = in.read(raw_dims, dim_bytes);
  if (got_dims < dim_bytes)
    BRAID_THROW(IoError, path, ": truncated IDX header: expected ", dim_bytes,
                " bytes of dimensions, got ", got_dims, with_hint(hint));

  IdxArray out;
  std::string shape;
  for (int i = 0; i < ndims; ++i) {
    const unsigned char* p = raw_dims + 4 * i;
    const uint32_t d =
        (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
    out.dims.push_back(d);
    shape += (i ? " x " : "") + std::to_string(d);
  }
  // Checking the bound before every multiplication also rules out overflow.
  uint64_t total = 1;
  for (const int64_t d : out.dims) {
    const auto ud = static_cast<uint64_t>(d);
    if (ud != 0 && total > max_bytes / ud)
      BRAID_THROW(IoError, path, ": IDX header declares ", shape, " elements, more than the ",
                  max_bytes, "-byte limit; the file is corrupt", with_hint(hint));
    total *= ud;
  }

  if (in.direct()) {
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(path, ec);
    const uint64_t header = 4 + dim_bytes;
    if (!ec && (size < header || size - header < total))
      BRAID_THROW(IoError, path, ": truncated: the header declares ", total,
                  " data bytes but the file holds ", size - header, with_hint(hint));
  }
  out.data = Buffer(total, MemCategory::data);
  const uint64_t got = in.read(out.data.data(), total);
  if (got < total)
    BRAID_THROW(IoError, path, ": truncated: the header declares ", total,
                " data bytes but the file holds ", got,
                in.truncated_stream() ? " (the gzip stream ends early)" : "", with_hint(hint));
  unsigned char extra;
  if (in.read(&extra, 1) != 0)
    BRAID_THROW(IoError, path, ": more data than the header's ", total,
                " bytes declare; the file is corrupt or not this format", with_hint(hint));
  return out;
}

}  // namespace braid::data
