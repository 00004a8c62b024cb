#include "parallel/key_ranges.h"

#include <algorithm>

#include "core/error.h"

namespace braid::parallel {
namespace {

// Groups needed to hold `units` in order without passing `cap` floats each.
int groups_needed(const std::vector<int64_t>& units, int64_t cap) {
  int groups = 1;
  int64_t load = 0;
  for (int64_t u : units) {
    if (load + u > cap) {
      ++groups;
      load = 0;
    }
    load += u;
  }
  return groups;
}

}  // namespace

std::vector<KeyRange> split_key_ranges(std::span<const optim::Segment> segments,
                                       int64_t buffer_size, int servers) {
  const auto n = static_cast<int64_t>(segments.size());
  BRAID_CHECK(servers >= 1, "key ranges: the number of servers must be >= 1, got ", servers);
  BRAID_CHECK(n >= servers, "key ranges: ", servers, " servers but the model has only ", n,
              " parameter tensors; a server holds whole tensors, so use at most ", n, " servers");
  optim::validate_segments({segments.begin(), segments.end()}, buffer_size);
  // Unit i runs from tensor i's start (0 for the first) to tensor i + 1's (the end of the
  // buffer for the last): padding goes with the tensor before it.
  std::vector<int64_t> starts(static_cast<size_t>(n) + 1);
  for (int64_t i = 0; i < n; ++i) {
    const optim::Segment& s = segments[static_cast<size_t>(i)];
    BRAID_CHECK(i == 0 || s.offset > segments[static_cast<size_t>(i - 1)].offset,
                "key ranges: segments must come in offset order ('", s.name, "' does not)");
    starts[static_cast<size_t>(i)] = i == 0 ? 0 : s.offset;
  }
  starts[static_cast<size_t>(n)] = buffer_size;
  std::vector<int64_t> units(static_cast<size_t>(n));
  for (size_t i = 0; i < units.size(); ++i) units[i] = starts[i + 1] - starts[i];

  // The smallest largest-range that S contiguous groups can achieve.
  int64_t lo = *std::max_element(units.begin(), units.end()), hi = buffer_size;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (groups_needed(units, mid) <= servers) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  // Fill greedily up to that size, closing a range early when the tensors left are just
  // enough to give every remaining server one.
  std::vector<KeyRange> out;
  out.reserve(static_cast<size_t>(servers));
  int64_t first = 0, load = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t u = units[static_cast<size_t>(i)];
    const auto servers_left = static_cast<int64_t>(servers) - static_cast<int64_t>(out.size());
    const bool must_close = i > first && n - i == servers_left - 1;
    if (i > first && (load + u > lo || must_close)) {
      out.push_back({starts[static_cast<size_t>(first)], starts[static_cast<size_t>(i)]});
      first = i;
      load = 0;
    }
    load += u;
  }
  out.push_back({starts[static_cast<size_t>(first)], buffer_size});
  // Invariant: exactly one range per server, tiling the buffer.
  BRAID_CHECK(static_cast<int>(out.size()) == servers, "key ranges: made ", out.size(),
              " ranges for ", servers, " servers (internal error)");
  return out;
}

std::vector<optim::Segment> segments_in(std::span<const optim::Segment> segments,
                                        const KeyRange& range) {
  std::vector<optim::Segment> out;
  for (const optim::Segment& s : segments) {
    if (s.offset < range.begin || s.offset >= range.end) continue;
    BRAID_CHECK(s.offset + s.numel <= range.end, "key ranges: tensor '", s.name,
                "' straddles the end of range [", range.begin, ", ", range.end, ")");
    optim::Segment r = s;
    r.offset -= range.begin;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace braid::parallel
