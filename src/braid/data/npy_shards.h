// Sharded .npy datasets: a training set written as many file pairs (features, labels),
// of which each rank reads only its own, so no rank touches, maps or pages in the others'.
//
// Files: each entry of the features (labels) list is a path or a glob pattern ('*', '?',
// '[...]'), expanded in name order, as tf.data's list_files(shuffle=False) or a WebDataset
// shard list; the two expanded lists pair up in order, and a count or sample-count
// mismatch is an error naming both files. Every rank expands the same config (the config
// agreement check at start compares the lists as written) and reads every file's header,
// so every rank computes the same assignment; the files must be visible to all ranks.
//
// Assignment: file f goes to rank f mod world (round robin, as WebDataset's split_by_node
// or tf.data's shard(world, rank) over files). Fewer files than ranks is an error (a rank
// with no data). The epoch: rank r's samples shuffled by (seed, epoch) (ShardMode::local);
// every rank takes as many samples as the largest rank holds (E = max_r n_r), the others
// wrapping around their own files (sample i is i mod n_r, as ShardMode::pad repeats the
// head of the order), so every rank runs the same number of steps, which DDP needs, and
// every sample is seen at least once an epoch. The imbalance costs repeats: with files of
// equal size and world dividing their number there are none; a warning says when more
// than 10% of an epoch would be repeats.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/npy_mapped.h"

namespace braid::data {

// Each pattern expanded (sorted by name; a path without '*', '?' or '[' as it is). A
// pattern matching nothing is an error naming `key` and the pattern.
std::vector<std::string> expand_npy_shards(const std::vector<std::string>& patterns,
                                           std::string_view key);

struct ShardPlan {
  std::vector<std::vector<size_t>> files;  // per rank: indices into the file list
  std::vector<int64_t> samples;            // per rank: the samples its files hold
  int64_t epoch_samples = 0;               // per rank per epoch: the largest of `samples`
  // Samples taken twice or more in an epoch, over all ranks (the padding).
  int64_t repeats() const;
};

// File f (holding counts[f] samples) to rank f mod world. An error when a rank gets none.
ShardPlan assign_npy_shards(const std::vector<int64_t>& counts, int world);

// Rank `rank`'s source: the features and labels lists expanded and paired, every header
// read, the plan made, and the rank's files opened (mapped or read, options.map) with
// options.epoch_size set to the plan's. `plan` (if given) receives the plan.
std::shared_ptr<const MappedNpySource> open_npy_shards(const std::vector<std::string>& features,
                                                       const std::vector<std::string>& labels,
                                                       int rank, int world,
                                                       MappedNpyOptions options,
                                                       ShardPlan* plan = nullptr);

}  // namespace braid::data
