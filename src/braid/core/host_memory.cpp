// Parses /proc/meminfo by hand: one line, no allocation sized by the file.
#include "core/host_memory.h"

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>

namespace braid {

std::optional<uint64_t> parse_mem_available(const std::string& meminfo_text) {
  std::istringstream in(meminfo_text);
  for (std::string line; std::getline(in, line);) {
    const std::string key = "MemAvailable:";
    if (line.compare(0, key.size(), key) != 0) continue;
    size_t i = key.size();
    while (i < line.size() && line[i] == ' ') ++i;
    uint64_t kib = 0;
    const size_t digits = i;
    for (; i < line.size() && line[i] >= '0' && line[i] <= '9'; ++i) {
      if (kib > (UINT64_MAX >> 10) / 10 - 9) return std::nullopt;
      kib = kib * 10 + static_cast<uint64_t>(line[i] - '0');
    }
    if (i == digits || line.compare(i, std::string::npos, " kB") != 0) return std::nullopt;
    return kib << 10;
  }
  return std::nullopt;
}

std::optional<uint64_t> mem_available_bytes(const std::string& meminfo) {
  std::ifstream in(meminfo);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return parse_mem_available(text.str());
}

MemoryFit fit_in_memory(uint64_t per_rank, int ranks, uint64_t available) {
  MemoryFit f;
  const uint64_t n = ranks < 1 ? 1 : static_cast<uint64_t>(ranks);
  f.need = per_rank > UINT64_MAX / n ? UINT64_MAX : per_rank * n;
  f.usable = available / 10 * 9;
  f.fits = f.need <= f.usable;
  return f;
}

std::string describe_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes) / 1024;
  size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(kUnits)) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
  return buf;
}

}  // namespace braid
