// Builds the training and evaluation loaders a TrainConfig asks for, and checks that the
// data fits the model (sample shape, dtype, number of classes) before training starts.
//
// Over `world` ranks, rank `rank` trains on its ShardMode::pad share of each epoch (every
// rank the same number of batches, as torch's DistributedSampler) and evaluates on its
// ShardMode::shard share of the evaluation split (each sample on exactly one rank; sum the
// ranks' data::EvalTally, eval_tally.h). The defaults (rank 0 of 1) are one process.
// With global_batch set, training reads the epoch in steps of that many samples shared by
// the ranks (data/sampler.h's step blocks): floor(N / global_batch) steps an epoch at every
// world size, the tail skipped, so a run continues at the same step on another number of
// ranks.
#pragma once

#include <memory>

#include "data/loader.h"
#include "data/splits.h"
#include "train/config.h"
#include "train/model_spec.h"

namespace braid::train {

struct DataLoaders {
  std::unique_ptr<data::Loader> train;
  std::unique_ptr<data::Loader> eval;
  // What a run records beside its config for evaluation and inference to read the data as
  // training did (OUT/data.json), null when there is nothing: for dataset csv the columns,
  // the class names by id (text labels) and the feature scaling (csv_standardize).
  nlohmann::json record;
};

// The data a process read, kept for the next loaders it builds: an elastic job builds them
// again for every membership round, and reading Fashion-MNIST again costs most of a second.
struct DataCache {
  std::shared_ptr<const data::Source> train, eval;
  nlohmann::json record;
};

struct DataPlacement {
  int rank = 0;
  int world = 1;
  // Validate on a split of the training data (splits.h) instead of the test split. Only for
  // indexed datasets (fashion-mnist, npy, csv); kind none keeps the test split.
  data::SplitSpec validation{};
  // Evaluate on the whole split whatever the rank (a parameter-server chief evaluates alone).
  bool evaluate_whole_split = false;
  // Evaluation's shard when it differs from training's (a pipeline: every stage trains on
  // the same batches, and each evaluates its share of the split); eval_world 0: as training.
  int eval_rank = 0;
  int eval_world = 0;
  // Where set, the sources are taken from it when it holds them, and kept in it otherwise.
  DataCache* cache = nullptr;
};

// The training batch of data-parallel rank `rank` of `world`: its share of global_batch
// when that is set (an error naming the key unless every rank gets a sample), else batch.
int64_t train_batch(const TrainConfig& config, int rank, int world);

DataLoaders make_loaders(const TrainConfig& config, const BuiltModel& model,
                         const DataPlacement& placement = {});

}  // namespace braid::train
