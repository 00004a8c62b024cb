// Before a job trains, its ranks agree on the config. Every rank hashes its resolved config
// (every key of the settings table but those marked per_rank: paths, thread counts, a
// benchmark's per-rank delay) and the hashes are allgathered over the job's world; ranks
// that differ exchange their settings and every rank throws the same error, naming each
// differing key with both values. So ranks started with different `lr`, `seed`, `batch`
// or `deterministic` are refused at start, within one collective, instead of training
// different models or deadlocking in different calls.
#pragma once

#include <string>
#include <vector>

#include "train/config.h"

namespace braid::comm {
class Group;
class Store;
}  // namespace braid::comm

namespace braid::train {

// "key=value" lines of every setting that must agree across ranks, in table order.
std::vector<std::string> agreed_settings(const TrainConfig& config);

// Collective over `world` (every rank of the job, servers included). Throws braid::Error
// naming every key where a rank differs from rank 0, with both values.
void check_same_config(comm::Group& world, const TrainConfig& config);

// Elastic jobs, before a process asks for a place: the first process to get here publishes
// its settings in `store` as the job's; any later one (a restart, a process started by hand
// to join) compares its own with them and throws braid::Error naming every differing key
// with both values, so a process started with another config is refused alone instead of
// failing the round of every member.
void check_config_of_job(comm::Store& store, const TrainConfig& config);

}  // namespace braid::train
