// XXH64 checksums for file formats (checkpoints, caches): fast enough (>10 GB/s) to verify
// every byte on load. The hash is the standard XXH64, so `xxh64sum` on the command line
// gives the same value as hex64(xxh64(file contents)).
//
// Xxh64Stream hashes data that arrives in pieces; its digest equals xxh64() over the
// concatenation. Move-only; not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace braid {

uint64_t xxh64(const void* data, size_t size, uint64_t seed = 0);

class Xxh64Stream {
 public:
  explicit Xxh64Stream(uint64_t seed = 0);
  ~Xxh64Stream();
  Xxh64Stream(Xxh64Stream&&) noexcept;
  Xxh64Stream& operator=(Xxh64Stream&&) noexcept;
  Xxh64Stream(const Xxh64Stream&) = delete;
  Xxh64Stream& operator=(const Xxh64Stream&) = delete;

  void update(const void* data, size_t size);
  uint64_t digest() const;  // may be called any number of times; update may continue

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// 16 lowercase hex digits, the form `xxh64sum` prints.
std::string hex64(uint64_t value);
// Inverse of hex64: exactly 16 hex digits (either case), else nullopt.
std::optional<uint64_t> parse_hex64(std::string_view text);

}  // namespace braid
