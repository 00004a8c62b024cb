// The key ranges of a parameter-server job: the flat parameter buffer cut into one
// contiguous range per server, each a whole number of parameter tensors, balanced by bytes.
//
// Whole tensors, because a server runs the optimizer on its range and some optimizers
// need a tensor whole (LARS and LAMB scale each layer by its norms). Contiguous, because
// a range is then one message each way and one slice of every flat buffer (parameters,
// gradients, optimizer state, a checkpoint). Balanced by the largest range, since a step
// waits for the slowest server: the cut minimises the largest range's floats (a linear
// partition, solved exactly by binary search on that size with a greedy fill), so with S
// servers no cut at tensor boundaries gives a smaller largest range. Padding between
// tensors belongs to the range of the tensor before it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "optim/segment.h"

namespace braid::parallel {

struct KeyRange {
  int64_t begin = 0, end = 0;  // floats of the flat buffer
  int64_t size() const { return end - begin; }
  friend bool operator==(const KeyRange&, const KeyRange&) = default;
};

// One range per server, in server order, tiling [0, buffer_size): server s holds
// [ranges[s].begin, ranges[s].end). `segments` are the model's tensors in offset order
// (optimizer segments). Every range holds at least one tensor: more servers than tensors
// is an error naming both counts.
std::vector<KeyRange> split_key_ranges(std::span<const optim::Segment> segments,
                                       int64_t buffer_size, int servers);

// The segments inside `range`, rebased to start at 0: what that range's server builds its
// optimizer over.
std::vector<optim::Segment> segments_in(std::span<const optim::Segment> segments,
                                        const KeyRange& range);

}  // namespace braid::parallel
