// Segment: one parameter tensor's range inside a flat fp32 buffer, as an optimizer sees it.
//
// Optimizers, clipping and (later) ZeRO shards work on lists of segments over the flat
// parameter/gradient layout (nn::ParamSet's layout table, converted by the caller, since
// optim/ does not see nn/). Offsets and sizes are in floats. The gaps between segments
// (alignment padding) are never read or written.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace braid::optim {

struct Segment {
  std::string name;    // the parameter's state_dict name, for error messages
  int64_t offset = 0;  // first float of the range
  int64_t numel = 0;   // floats in the range
  bool decay = true;   // weight decay (and LARS/LAMB layer adaptation) applies
};

// Throws braid::Error naming the segment when one has a negative offset or size, ends past
// buffer_size, or overlaps another (an overlapped range would be updated twice per step).
void validate_segments(const std::vector<Segment>& segments, int64_t buffer_size);

}  // namespace braid::optim
