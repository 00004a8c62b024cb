// What a lossy gradient codec costs, measured here rather than assumed: two ranks (threads
// over the in-process transport) run the codec's allreduce (parallel/codec.h) on one bucket
// of a matrix's gradients, after its warm-up steps. The codec's own report gives the bytes
// it put on the wire against an fp32 ring allreduce's (its ratio); its time over the plain
// fp32 sum's on the same transport is its encode and decode, per float. The simulator
// sends a bucket's bytes times the ratio over the link and adds that compute to the
// bucket's reduction, on the communication stream where the codec runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace braid::plan {

struct CodecProfile {
  std::string name;              // as the config's compression.codec
  double wire_ratio = 1;         // wire bytes over an fp32 ring allreduce's
  double seconds_per_float = 0;  // encode and decode, beyond the fp32 sum
};

// int8 and powersgd (rank 4) over a bucket of `floats` (a square matrix), medians of
// `repeats` calls.
std::vector<CodecProfile> measure_codecs(int64_t floats = int64_t{1} << 20, int repeats = 3);

}  // namespace braid::plan
