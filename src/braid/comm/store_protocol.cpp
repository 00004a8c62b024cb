// Encoding and validation of store requests and responses (see store_protocol.h). The
// parser reads through a bounds-checked cursor: every size is compared with what is left
// of the body and with its limit before a byte is copied.
#include "comm/store_protocol.h"

#include "core/error.h"

namespace braid::comm {

namespace {

void put_u32(Bytes& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void put_i64(Bytes& out, int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(u >> (8 * i)));
}

void put_blob(Bytes& out, const uint8_t* data, size_t size) {
  put_u32(out, static_cast<uint32_t>(size));
  out.insert(out.end(), data, data + size);
}

// Writes the final body length into the 4 bytes reserved at the front.
Bytes finish(Bytes out) {
  const auto body = static_cast<uint32_t>(out.size() - kStoreLengthBytes);
  for (size_t i = 0; i < kStoreLengthBytes; ++i) out[i] = static_cast<uint8_t>(body >> (8 * i));
  return out;
}

class Cursor {
 public:
  Cursor(std::span<const uint8_t> data, const char* what) : data_(data), what_(what) {}

  uint8_t u8() { return take(1)[0]; }
  uint32_t u32() {
    const auto b = take(4);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t{b[i]} << (8 * i);
    return v;
  }
  int64_t i64() {
    const auto b = take(8);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{b[i]} << (8 * i);
    return static_cast<int64_t>(v);
  }
  // A u32 size then that many bytes; `field` and `limit` for the error message.
  std::span<const uint8_t> blob(const char* field, size_t limit) {
    const size_t size = u32();
    if (size > limit)
      BRAID_THROW(Error, what_, ": ", field, " of ", size, " bytes at offset ", pos_ - 4,
                  " exceeds the limit of ", limit, " bytes");
    return take(size);
  }
  // A count of items that take at least `min_item_bytes` each: the count must fit both its
  // limit and what is left, so a forged count cannot make the caller reserve memory.
  size_t count(const char* field, size_t limit, size_t min_item_bytes) {
    const size_t n = u32();
    if (n > limit) BRAID_THROW(Error, what_, ": ", n, " ", field, " exceeds the limit of ", limit);
    if (n * min_item_bytes > left())
      BRAID_THROW(Error, what_, ": truncated: ", n, " ", field, " need at least ",
                  n * min_item_bytes, " bytes but ", left(), " remain");
    return n;
  }
  size_t left() const { return data_.size() - pos_; }
  void expect_end() const {
    if (left() != 0)
      BRAID_THROW(Error, what_, ": ", left(), " unexpected bytes after the end at offset ", pos_);
  }

 private:
  std::span<const uint8_t> take(size_t n) {
    if (n > left())
      BRAID_THROW(Error, what_, ": truncated: needs ", n, " bytes at offset ", pos_, " but ",
                  left(), " remain");
    const auto s = data_.subspan(pos_, n);
    pos_ += n;
    return s;
  }

  std::span<const uint8_t> data_;
  size_t pos_ = 0;
  const char* what_;
};

bool valid_op(uint8_t op) { return op >= 1 && op <= 6; }

// The per-op shape both sides enforce; `what` prefixes the message.
void check_shape(const StoreRequest& r, const char* what) {
  const auto name = store_op_name(r.op);
  const bool waits = r.op == StoreOp::get || r.op == StoreOp::wait;
  const size_t values = r.op == StoreOp::set ? 1 : r.op == StoreOp::compare_set ? 2 : 0;
  if (r.op != StoreOp::wait && r.keys.size() != 1)
    BRAID_THROW(Error, what, ": ", name, " takes one key, not ", r.keys.size());
  if (r.keys.size() > kMaxStoreWaitKeys)
    BRAID_THROW(Error, what, ": wait on ", r.keys.size(), " keys exceeds the limit of ",
                kMaxStoreWaitKeys);
  if (r.values.size() != values)
    BRAID_THROW(Error, what, ": ", name, " takes ", values, " values, not ", r.values.size());
  if (r.op != StoreOp::add && r.delta != 0)
    BRAID_THROW(Error, what, ": ", name, " carries a delta (", r.delta, "); only add does");
  if (waits ? r.timeout_ms < -1 : r.timeout_ms != -1)
    BRAID_THROW(Error, what, ": ", name, " has timeout_ms ", r.timeout_ms,
                waits ? " (must be >= 0, or -1 for none)" : " (must be -1: it does not wait)");
  for (const auto& k : r.keys)
    if (k.size() > kMaxStoreKeyBytes)
      BRAID_THROW(Error, what, ": a key of ", k.size(), " bytes exceeds the limit of ",
                  kMaxStoreKeyBytes, " bytes");
  for (const auto& v : r.values)
    if (v.size() > kMaxStoreValueBytes)
      BRAID_THROW(Error, what, ": a value of ", v.size(), " bytes exceeds the limit of ",
                  kMaxStoreValueBytes,
                  " bytes (the store is for small facts; send bulk data "
                  "over the transport)");
}

}  // namespace

std::string_view store_op_name(StoreOp op) {
  switch (op) {
    case StoreOp::set:
      return "set";
    case StoreOp::get:
      return "get";
    case StoreOp::add:
      return "add";
    case StoreOp::compare_set:
      return "compare_set";
    case StoreOp::wait:
      return "wait";
    case StoreOp::remove:
      return "remove";
  }
  return "unknown";
}

Bytes encode_request(const StoreRequest& request) {
  check_shape(request, "store request");
  size_t size = kStoreLengthBytes + kStoreRequestFixedBytes;
  for (const auto& k : request.keys) size += 4 + k.size();
  for (const auto& v : request.values) size += 4 + v.size();
  Bytes out;
  out.reserve(size);
  put_u32(out, 0);  // length, filled in by finish()
  out.push_back(static_cast<uint8_t>(request.op));
  put_i64(out, request.timeout_ms);
  put_i64(out, request.delta);
  put_u32(out, static_cast<uint32_t>(request.keys.size()));
  for (const auto& k : request.keys)
    put_blob(out, reinterpret_cast<const uint8_t*>(k.data()), k.size());
  put_u32(out, static_cast<uint32_t>(request.values.size()));
  for (const auto& v : request.values) put_blob(out, v.data(), v.size());
  return finish(std::move(out));
}

Bytes encode_response(const StoreResponse& response) {
  BRAID_CHECK(response.value.size() <= kMaxStoreValueBytes, "store response of ",
              response.value.size(), " bytes exceeds the limit of ", kMaxStoreValueBytes);
  Bytes out;
  out.reserve(kStoreLengthBytes + kStoreResponseFixedBytes + response.value.size());
  put_u32(out, 0);
  out.push_back(static_cast<uint8_t>(response.status));
  put_i64(out, response.number);
  put_blob(out, response.value.data(), response.value.size());
  return finish(std::move(out));
}

size_t parse_store_length(std::span<const uint8_t> prefix, size_t max_body, std::string_view what) {
  BRAID_CHECK(prefix.size() == kStoreLengthBytes, what, ": length prefix of ", prefix.size(),
              " bytes");
  Cursor c(prefix, "length prefix");
  const size_t body = c.u32();
  if (body > max_body)
    BRAID_THROW(Error, what, ": message of ", body, " bytes exceeds the limit of ", max_body,
                " bytes");
  return body;
}

StoreRequest parse_request(std::span<const uint8_t> body) {
  static constexpr char kWhat[] = "store request";
  if (body.size() > kMaxStoreRequestBytes)
    BRAID_THROW(Error, kWhat, ": ", body.size(), " bytes exceeds the limit of ",
                kMaxStoreRequestBytes);
  Cursor c(body, kWhat);
  StoreRequest r;
  const uint8_t op = c.u8();
  if (!valid_op(op)) BRAID_THROW(Error, kWhat, ": unknown operation ", int{op});
  r.op = static_cast<StoreOp>(op);
  r.timeout_ms = c.i64();
  r.delta = c.i64();
  const size_t keys = c.count("keys", kMaxStoreWaitKeys, 4);
  r.keys.reserve(keys);
  for (size_t i = 0; i < keys; ++i) {
    const auto k = c.blob("key", kMaxStoreKeyBytes);
    r.keys.emplace_back(reinterpret_cast<const char*>(k.data()), k.size());
  }
  const size_t values = c.count("values", 2, 4);
  r.values.reserve(values);
  for (size_t i = 0; i < values; ++i) {
    const auto v = c.blob("value", kMaxStoreValueBytes);
    r.values.emplace_back(v.begin(), v.end());
  }
  c.expect_end();
  check_shape(r, kWhat);
  return r;
}

StoreResponse parse_response(std::span<const uint8_t> body) {
  static constexpr char kWhat[] = "store response";
  Cursor c(body, kWhat);
  StoreResponse r;
  const uint8_t status = c.u8();
  if (status > static_cast<uint8_t>(StoreStatus::error))
    BRAID_THROW(Error, kWhat, ": unknown status ", int{status});
  r.status = static_cast<StoreStatus>(status);
  r.number = c.i64();
  const auto v = c.blob("value", kMaxStoreValueBytes);
  r.value.assign(v.begin(), v.end());
  c.expect_end();
  return r;
}

}  // namespace braid::comm
