// How much memory this host can still give, so that a size taken from flags or a config
// (a benchmark's largest message on every local rank, a batch, a model) is refused with a
// clear error before it is allocated, instead of waking the kernel's OOM killer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace braid {

// MemAvailable of `meminfo` in bytes (the kernel's estimate of what can be allocated
// without swapping); nullopt when the file or the line cannot be read.
std::optional<uint64_t> mem_available_bytes(const std::string& meminfo = "/proc/meminfo");

// The MemAvailable line of a /proc/meminfo text ("MemAvailable:  123 kB"), in bytes.
std::optional<uint64_t> parse_mem_available(const std::string& meminfo_text);

// Whether `ranks` processes on this host, each needing `per_rank` bytes, fit together in
// `available` bytes with a tenth kept free (for transports, the page cache, everyone
// else). Saturates instead of overflowing.
struct MemoryFit {
  uint64_t need = 0;    // per_rank x ranks
  uint64_t usable = 0;  // 90% of available
  bool fits = false;
};
MemoryFit fit_in_memory(uint64_t per_rank, int ranks, uint64_t available);

// "512 B", "3.5 KiB", "16.0 GiB": sizes in messages.
std::string describe_bytes(uint64_t bytes);

}  // namespace braid
