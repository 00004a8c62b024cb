// A rank's share of a sharded training state (ZeRO), cut for one layout of the ranks: the
// ranges of the flat parameter layout the rank owns, and over them the parameters and the
// optimizer's float state. Elastic training keeps each rank's shard of a commit and a copy
// of its left neighbour's (Strategy::pass_shard_on), so that a lost rank's share survives
// on the rank to its right; the next round puts the whole state together from the shards
// its members hold (train/shard_recovery.h) and cuts it again for its own layout.
//
// What every rank holds alike (the trainer's position, the model's buffers) rides along in
// each shard: any one shard of a commit then carries it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace braid::parallel {

struct StateShard {
  int64_t round = 0;  // the elastic round whose layout it was cut for
  int64_t world = 0;  // ranks of that layout
  int64_t rank = -1;  // whose share it is
  int64_t step = -1;  // the trainer's step it holds (-1: empty)
  // (begin, count) pairs of the flat layout, in order; the values follow them.
  std::vector<int64_t> ranges;
  // The optimizer's float state buffers by name, in the optimizer's order, and its step
  // count (the same in every chunk's optimizer).
  std::vector<std::string> names;
  int64_t optimizer_steps = 0;
  // The parameters over `ranges`, then each named state buffer over them.
  std::vector<float> values;
  std::string position;          // the trainer's position (JSON): the same on every rank
  std::vector<uint8_t> buffers;  // the model's buffers, packed: the same on every rank

  bool empty() const { return step < 0; }
  int64_t floats_per_vector() const;  // sum of the ranges' counts
  // The shard as one byte string (to send to another rank), and back; from_bytes reuses
  // `into`'s memory and throws braid::Error on a truncated or inconsistent string.
  std::vector<uint8_t> bytes() const;
  static void from_bytes(const std::vector<uint8_t>& bytes, StateShard& into);
  // The same without the values, which a sender then sends from `values` as they are and
  // a receiver receives into them (sized by values_size() once the header is read): a
  // commit passed on copies its floats no more than the transport does.
  std::vector<uint8_t> header_bytes() const;
  static void from_header(const std::vector<uint8_t>& bytes, StateShard& into);
  size_t values_size() const {
    return static_cast<size_t>(floats_per_vector()) * (1 + names.size());
  }
};

}  // namespace braid::parallel
