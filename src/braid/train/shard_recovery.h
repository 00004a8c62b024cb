// Elastic training of a sharded strategy (ZeRO): the next round's members put a whole
// commit together from the shards they hold (train_commit.h: each member's own shard and
// its left neighbour's, of the newest two commits).
//
// Every member tells the others which shards it holds (one allgather); all pick, alike, the
// newest commit of the newest round whose every shard some member holds, and each shard's
// holder (the lowest-ranked) sends it to rank 0, which writes the whole state in the full
// logical layout of the round's trainer: a TrainCommit that Trainer::restore loads on any
// world size once rank 0 has shared it. One rank lost loses no shard (its right neighbour
// holds a copy); neighbours lost together lose one, and then the commit before, or none.
#pragma once

#include "comm/group.h"
#include "nn/params.h"
#include "optim/optimizer.h"
#include "train/train_commit.h"

namespace braid::train {

// Collective over the round's `group`. True when the members hold a whole commit: `whole`
// then holds it on rank 0 (elsewhere only its step). `params` and `optimizer_layout`
// (Strategy::optimizer_state_layout) are the round's trainer's.
bool gather_shards(comm::Group& group, const TrainCommit& mine, const nn::ParamSet& params,
                   const optim::NamedTensors& optimizer_layout, TrainCommit& whole);

}  // namespace braid::train
