#include "parallel/state_shard.h"

#include <cstring>

#include "core/error.h"

namespace braid::parallel {
namespace {

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>& out) : out_(out) {}
  void i64(int64_t v) { raw(&v, sizeof v); }
  void raw(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    out_.insert(out_.end(), p, p + n);
  }
  void block(const void* data, size_t n) {
    i64(static_cast<int64_t>(n));
    raw(data, n);
  }

 private:
  std::vector<uint8_t>& out_;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& in) : in_(in) {}
  int64_t i64() {
    int64_t v = 0;
    take(&v, sizeof v);
    return v;
  }
  void take(void* into, size_t n) {
    BRAID_CHECK(n <= in_.size() - at_, "state shard: truncated at byte ", at_, " of ", in_.size(),
                " (wanted ", n, " more)");
    if (n > 0) std::memcpy(into, in_.data() + at_, n);
    at_ += n;
  }
  size_t size() {
    const int64_t n = i64();
    BRAID_CHECK(n >= 0 && static_cast<size_t>(n) <= in_.size() - at_, "state shard: a block of ", n,
                " bytes at byte ", at_, " runs past its ", in_.size());
    return static_cast<size_t>(n);
  }
  bool done() const { return at_ == in_.size(); }

 private:
  const std::vector<uint8_t>& in_;
  size_t at_ = 0;
};

}  // namespace

int64_t StateShard::floats_per_vector() const {
  int64_t n = 0;
  for (size_t i = 1; i < ranges.size(); i += 2) n += ranges[i];
  return n;
}

namespace {

void write_header(const StateShard& s, Writer& w) {
  for (int64_t v : {s.round, s.world, s.rank, s.step, s.optimizer_steps}) w.i64(v);
  w.block(s.ranges.data(), s.ranges.size() * sizeof(int64_t));
  w.i64(static_cast<int64_t>(s.names.size()));
  for (const std::string& n : s.names) w.block(n.data(), n.size());
  w.block(s.position.data(), s.position.size());
  w.block(s.buffers.data(), s.buffers.size());
}

void read_header(Reader& r, StateShard& into) {
  into.round = r.i64();
  into.world = r.i64();
  into.rank = r.i64();
  into.step = r.i64();
  into.optimizer_steps = r.i64();
  const size_t n = r.size();
  BRAID_CHECK(n % (2 * sizeof(int64_t)) == 0, "state shard: ranges of ", n,
              " bytes are not (begin, count) pairs");
  into.ranges.resize(n / sizeof(int64_t));
  r.take(into.ranges.data(), n);
  const int64_t names = r.i64();
  BRAID_CHECK(names >= 0 && names < 64, "state shard: ", names, " optimizer state names");
  into.names.resize(static_cast<size_t>(names));
  for (std::string& name : into.names) {
    name.resize(r.size());
    r.take(name.data(), name.size());
  }
  into.position.resize(r.size());
  r.take(into.position.data(), into.position.size());
  into.buffers.resize(r.size());
  r.take(into.buffers.data(), into.buffers.size());
}

}  // namespace

std::vector<uint8_t> StateShard::header_bytes() const {
  std::vector<uint8_t> out;
  Writer w(out);
  write_header(*this, w);
  return out;
}

void StateShard::from_header(const std::vector<uint8_t>& bytes, StateShard& into) {
  Reader r(bytes);
  read_header(r, into);
  BRAID_CHECK(r.done(), "state shard: bytes left after its header");
}

std::vector<uint8_t> StateShard::bytes() const {
  std::vector<uint8_t> out;
  out.reserve(128 + ranges.size() * 8 + values.size() * 4 + position.size() + buffers.size());
  Writer w(out);
  write_header(*this, w);
  w.block(values.data(), values.size() * sizeof(float));
  return out;
}

void StateShard::from_bytes(const std::vector<uint8_t>& bytes, StateShard& into) {
  Reader r(bytes);
  read_header(r, into);
  const size_t n = r.size();
  BRAID_CHECK(n == into.values_size() * sizeof(float), "state shard: ", n / sizeof(float),
              " floats do not fill ", 1 + into.names.size(), " vectors over ranges of ",
              into.floats_per_vector());
  into.values.resize(into.values_size());
  r.take(into.values.data(), n);
  BRAID_CHECK(r.done(), "state shard: bytes left after its end");
}

}  // namespace braid::parallel
