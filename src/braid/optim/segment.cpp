#include "optim/segment.h"

#include <algorithm>

#include "core/error.h"

namespace braid::optim {

void validate_segments(const std::vector<Segment>& segments, int64_t buffer_size) {
  BRAID_CHECK(buffer_size >= 0, "optimizer buffer size ", buffer_size, " is negative");
  std::vector<const Segment*> sorted;
  sorted.reserve(segments.size());
  for (const Segment& s : segments) {
    BRAID_CHECK(s.offset >= 0 && s.numel >= 0 && s.offset <= buffer_size - s.numel, "segment '",
                s.name, "' [", s.offset, ", ", s.offset + s.numel,
                ") does not lie inside the flat buffer of ", buffer_size,
                " floats; build segments from the same layout as the buffer");
    if (s.numel > 0) sorted.push_back(&s);  // an empty range overlaps nothing
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const Segment* a, const Segment* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    const Segment& a = *sorted[i - 1];
    const Segment& b = *sorted[i];
    BRAID_CHECK(a.offset + a.numel <= b.offset, "segments '", a.name, "' [", a.offset, ", ",
                a.offset + a.numel, ") and '", b.name, "' [", b.offset, ", ", b.offset + b.numel,
                ") overlap; each parameter must appear in exactly one segment");
  }
}

}  // namespace braid::optim
