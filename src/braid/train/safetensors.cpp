#include "train/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/checksum.h"
#include "core/error.h"
#include "core/mapped_file.h"

namespace braid::train {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host needs byte swapping");

using Json = nlohmann::ordered_json;  // keeps the header's tensor order

constexpr DType kDTypes[] = {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64};

bool dtype_from_name(const std::string& name, DType* out) {
  for (DType d : kDTypes)
    if (safetensors_dtype(d) == name) {
      *out = d;
      return true;
    }
  return false;
}

// A tensor's entry in the header, validated against the data section.
struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

// Everything the reader throws goes through here so each message names the file.
class Reader {
 public:
  Reader(const unsigned char* data, size_t size, const std::string& source)
      : data_(data), size_(size), source_(source) {}

  SafetensorsFile parse();

 private:
  template <typename... Args>
  [[noreturn]] void fail(const Args&... args) const {
    BRAID_THROW(Error, "safetensors file '", source_, "': ", args...);
  }
  Json parse_header(uint64_t header_bytes);
  Entry parse_entry(const std::string& name, const Json& value, uint64_t data_bytes) const;
  void parse_metadata(const Json& value, std::map<std::string, std::string>* out) const;
  void check_no_overlap(std::vector<Entry> entries) const;
  void check_checksum(const std::map<std::string, std::string>& metadata,
                      uint64_t data_start) const;

  const unsigned char* data_;
  size_t size_;
  const std::string& source_;
};

Json Reader::parse_header(uint64_t header_bytes) {
  const char* text = reinterpret_cast<const char*>(data_ + 8);
  // A legitimate header nests three deep (root, tensor, shape); refusing deeper input
  // bounds the work a hostile header can cause, and duplicate names would silently drop
  // a tensor, so both are caught while parsing.
  std::unordered_set<std::string> names;
  auto guard = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth > 3) fail("header nests deeper than a safetensors header can: corrupt file");
    if (event == Json::parse_event_t::key && depth == 1 &&
        !names.insert(parsed.get<std::string>()).second)
      fail("tensor '", parsed.get<std::string>(), "' appears twice in the header");
    return true;
  };
  try {
    return Json::parse(text, text + header_bytes, guard);
  } catch (const Json::exception& e) {
    fail("header is not valid JSON (", e.what(), "): corrupt or not a safetensors file");
  }
}

Entry Reader::parse_entry(const std::string& name, const Json& value, uint64_t data_bytes) const {
  if (!value.is_object()) fail("header entry '", name, "' is not an object");
  const auto dtype_it = value.find("dtype");
  const auto shape_it = value.find("shape");
  const auto offsets_it = value.find("data_offsets");
  if (dtype_it == value.end() || shape_it == value.end() || offsets_it == value.end())
    fail("tensor '", name, "' lacks one of dtype, shape, data_offsets");
  Entry e{name, DType::f32, {}, 0, 0};
  if (!dtype_it->is_string() || !dtype_from_name(dtype_it->get<std::string>(), &e.dtype))
    fail("tensor '", name, "' has dtype ", dtype_it->dump(),
         "; braid reads F32, BF16, F16, I32 and I64 (convert the file first)");
  if (!shape_it->is_array()) fail("tensor '", name, "' has a shape that is not a list");
  if (shape_it->size() > static_cast<size_t>(Shape::kMaxDims))
    fail("tensor '", name, "' has ", shape_it->size(), " dimensions; braid supports at most ",
         Shape::kMaxDims);
  // The byte count is the product of the dimensions times the element size, computed
  // with overflow checks so a hostile shape cannot wrap around to a small number.
  uint64_t bytes = dtype_size(e.dtype);
  bool overflow = false;
  for (const Json& d : *shape_it) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail("tensor '", name, "' has shape ", shape_it->dump(),
           ": dimensions must be non-negative integers");
    e.shape.push_back(d.get<int64_t>());
    overflow |= __builtin_mul_overflow(bytes, d.get<uint64_t>(), &bytes);
  }
  const Json& offsets = *offsets_it;
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    fail("tensor '", name, "' has data_offsets ", offsets.dump(),
         "; expected [begin, end], non-negative integers");
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  if (e.begin > e.end || e.end > data_bytes)
    fail("tensor '", name, "' has data_offsets [", e.begin, ", ", e.end,
         "] outside the data section of ", data_bytes, " bytes: truncated or corrupt file");
  if (overflow)
    fail("tensor '", name, "' has shape ", Shape(e.shape).str(),
         " whose size in bytes overflows 64 bits: corrupt file");
  if (bytes != e.end - e.begin)
    fail("tensor '", name, "' has shape ", Shape(e.shape).str(), " of ", safetensors_dtype(e.dtype),
         " (", bytes, " bytes) but data_offsets [", e.begin, ", ", e.end, "] span ",
         e.end - e.begin, " bytes");
  return e;
}

void Reader::parse_metadata(const Json& value, std::map<std::string, std::string>* out) const {
  if (value.is_null()) return;
  if (!value.is_object()) fail("__metadata__ is not an object");
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string()) fail("__metadata__ value '", key, "' is not a string");
    (*out)[key] = v.get<std::string>();
  }
}

void Reader::check_no_overlap(std::vector<Entry> entries) const {
  std::erase_if(entries, [](const Entry& e) { return e.begin == e.end; });
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < entries.size(); ++i)
    if (entries[i].begin < entries[i - 1].end)
      fail("tensors '", entries[i - 1].name, "' [", entries[i - 1].begin, ", ", entries[i - 1].end,
           ") and '", entries[i].name, "' [", entries[i].begin, ", ", entries[i].end,
           ") overlap in the data section");
}

void Reader::check_checksum(const std::map<std::string, std::string>& metadata,
                            uint64_t data_start) const {
  const auto it = metadata.find(std::string(kChecksumKey));
  if (it == metadata.end()) return;  // written by another tool
  const auto expected = parse_hex64(it->second);
  if (!expected) fail("metadata ", kChecksumKey, " = '", it->second, "' is not 16 hex digits");
  const uint64_t actual = xxh64(data_ + data_start, size_ - data_start);
  if (actual != *expected)
    fail("data checksum mismatch (header records ", it->second, ", data hashes to ", hex64(actual),
         "): the file is corrupt; restore it from a copy");
}

SafetensorsFile Reader::parse() {
  if (size_ < 8)
    fail("is ", size_,
         " bytes, shorter than the 8-byte header length: truncated or not a safetensors file");
  uint64_t header_bytes;
  std::memcpy(&header_bytes, data_, 8);
  if (header_bytes > kMaxHeaderBytes)
    fail("header length ", header_bytes, " exceeds the ", kMaxHeaderBytes >> 20,
         " MiB limit: corrupt or not a safetensors file");
  if (header_bytes > size_ - 8)
    fail("header length ", header_bytes, " runs past the end of the file (", size_,
         " bytes): truncated file");
  const Json header = parse_header(header_bytes);
  if (!header.is_object()) fail("header is not a JSON object");

  const uint64_t data_start = 8 + header_bytes;
  const uint64_t data_bytes = size_ - data_start;
  SafetensorsFile file;
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__")
      parse_metadata(value, &file.metadata);
    else
      entries.push_back(parse_entry(key, value, data_bytes));
  }
  check_no_overlap(entries);
  check_checksum(file.metadata, data_start);

  // Only now, with every size checked against the file, is memory allocated.
  file.tensors.reserve(entries.size());
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(Shape(e.shape), e.dtype, MemCategory::other);
    if (t.nbytes()) std::memcpy(t.raw(), data_ + data_start + e.begin, t.nbytes());
    file.tensors.push_back({e.name, std::move(t)});
  }
  return file;
}

}  // namespace

std::string_view safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "F32";
    case DType::bf16:
      return "BF16";
    case DType::f16:
      return "F16";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
    case DType::f64:
      return "F64";
  }
  return "?";
}

FileDigest write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                             const std::map<std::string, std::string>& metadata) {
  std::unordered_set<std::string> names;
  for (const NamedTensor& t : tensors) {
    BRAID_CHECK(!t.name.empty() && t.name != "__metadata__", "cannot write '", path,
                "': invalid tensor name '", t.name, "'");
    BRAID_CHECK(names.insert(t.name).second, "cannot write '", path, "': tensor '", t.name,
                "' given twice");
    BRAID_CHECK(t.tensor.raw() != nullptr || t.tensor.numel() == 0, "cannot write '", path,
                "': tensor '", t.name, "' has no data");
  }
  // Largest elements first keeps every tensor naturally aligned without gaps.
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return dtype_size(tensors[a].tensor.dtype()) > dtype_size(tensors[b].tensor.dtype());
  });
  std::vector<uint64_t> begin(tensors.size());
  uint64_t offset = 0;
  Xxh64Stream data_hash;
  for (size_t i : order) {
    begin[i] = offset;
    offset += tensors[i].tensor.nbytes();
    data_hash.update(tensors[i].tensor.raw(), tensors[i].tensor.nbytes());
  }

  Json header = Json::object();
  Json& meta = header["__metadata__"] = Json::object();
  for (const auto& [key, value] : metadata) meta[key] = value;
  meta[std::string(kChecksumKey)] = hex64(data_hash.digest());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i].tensor;
    header[tensors[i].name] = {{"dtype", std::string(safetensors_dtype(t.dtype()))},
                               {"shape", t.shape().to_vector()},
                               {"data_offsets", {begin[i], begin[i] + t.nbytes()}}};
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const Json::exception& e) {
    BRAID_THROW(Error, "cannot write '", path, "': tensor names and metadata must be UTF-8 (",
                e.what(), ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  const uint64_t header_bytes = text.size();

  AtomicFile file(path);
  file.write(&header_bytes, 8);
  file.write(text);
  for (size_t i : order) file.write(tensors[i].tensor.raw(), tensors[i].tensor.nbytes());
  return file.commit();
}

const Tensor* SafetensorsFile::find(const std::string& name) const {
  for (const NamedTensor& t : tensors)
    if (t.name == name) return &t.tensor;
  return nullptr;
}

SafetensorsFile read_safetensors(const std::string& path) {
  const MappedFile file(path);
  return parse_safetensors(file.data(), file.size(), path);
}

SafetensorsFile parse_safetensors(const void* data, size_t size, const std::string& source) {
  return Reader(static_cast<const unsigned char*>(data), size, source).parse();
}

}  // namespace braid::train
