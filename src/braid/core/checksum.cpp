#include "core/checksum.h"

#include <xxhash.h>

#include <new>

namespace braid {

uint64_t xxh64(const void* data, size_t size, uint64_t seed) { return XXH64(data, size, seed); }

// xxhash keeps its state type opaque unless XXH_STATIC_LINKING_ONLY; its own allocator
// keeps this header free of <xxhash.h>, which only braid_core may include.
struct Xxh64Stream::State {
  XXH64_state_t* s;
  explicit State(uint64_t seed) : s(XXH64_createState()) {
    if (!s) throw std::bad_alloc();
    XXH64_reset(s, seed);
  }
  ~State() { XXH64_freeState(s); }
  State(const State&) = delete;
  State& operator=(const State&) = delete;
};

Xxh64Stream::Xxh64Stream(uint64_t seed) : state_(std::make_unique<State>(seed)) {}
Xxh64Stream::~Xxh64Stream() = default;
Xxh64Stream::Xxh64Stream(Xxh64Stream&&) noexcept = default;
Xxh64Stream& Xxh64Stream::operator=(Xxh64Stream&&) noexcept = default;

void Xxh64Stream::update(const void* data, size_t size) {
  if (size) XXH64_update(state_->s, data, size);
}

uint64_t Xxh64Stream::digest() const { return XXH64_digest(state_->s); }

std::string hex64(uint64_t value) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, value >>= 4) out[static_cast<size_t>(i)] = kDigits[value & 15];
  return out;
}

std::optional<uint64_t> parse_hex64(std::string_view text) {
  if (text.size() != 16) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    int digit;
    if (c >= '0' && c <= '9')
      digit = c - '0';
    else if (c >= 'a' && c <= 'f')
      digit = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      digit = c - 'A' + 10;
    else
      return std::nullopt;
    value = value << 4 | static_cast<uint64_t>(digit);
  }
  return value;
}

}  // namespace braid
