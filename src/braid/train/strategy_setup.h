// Chooses and builds the strategy a TrainConfig asks for (config.strategy), over the
// rank's group when it is in a job: the one place train/ maps settings onto parallel/.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "parallel/group_stats_reducer.h"
#include "parallel/mesh_strategy.h"
#include "parallel/ps_protocol.h"
#include "parallel/ps_shard.h"
#include "parallel/strategy.h"
#include "train/config.h"

namespace braid::comm {
class Group;
}

namespace braid::train {

// The options every strategy shares, from the config (optimizer, clipping, accumulation,
// determinism, seed).
parallel::StepOptions step_options(const TrainConfig& config);

// What make_strategy refuses, without building anything: the strategy's name ("auto"
// resolved) when `config` can run over `world` ranks (of layout `ps` in a parameter-server
// job), else an Error saying why. Pure, so every process of a job, servers included, runs it
// before the job meets and all refuse alike: one left behind would wait in a collective for
// those that stopped, and its I/O error could become the job's last line.
std::string check_strategy(const TrainConfig& config, int world,
                           const std::optional<parallel::PsLayout>& ps = std::nullopt);

// "single" needs no group (or a group of one); "ddp" runs over `group` (a group of one
// is allowed: it is the one-process run, bit for bit); "auto" is ddp when the group has
// more than one rank, ps in a parameter-server job. "ps" runs on a worker of `ps`'s layout
// over the world group. An error names the strategy and what it needs.
// `batchnorm_reducer`: what the model's BatchNorm layers were built with (sync_batchnorm).
std::unique_ptr<parallel::Strategy> make_strategy(
    const TrainConfig& config, std::unique_ptr<nn::Module> module,
    std::shared_ptr<comm::Group> group,
    std::shared_ptr<parallel::GroupStatsReducer> batchnorm_reducer = nullptr,
    std::optional<parallel::PsLayout> ps = std::nullopt);

// The data x tensor x pipeline mesh a config asks for over `world` ranks: mesh.* where
// given, else tensor_parallel and pipeline.stages (strategy tensor or pipeline alone: every
// rank on that axis), the data axis taking the rest. nullopt: no model parallelism.
std::optional<parallel::MeshShape> mesh_shape(const TrainConfig& config, int world);

// The consistency rules of a parameter-server job from the config's ps.* keys.
parallel::PsRules ps_rules(const TrainConfig& config, int workers);

// The config's compression section (and comm_dtype, its older spelling for the casts): the
// reducer's codec, and the encoding of parameter-server pushes.
parallel::CodecConfig codec_config(const TrainConfig& config);

// The reducer for SyncBatchNorm when the config asks for it and the job has ranks to
// share statistics with; null otherwise.
std::shared_ptr<parallel::GroupStatsReducer> batchnorm_reducer(
    const TrainConfig& config, const std::shared_ptr<comm::Group>& group);

}  // namespace braid::train
