// Builds the training and evaluation loaders a TrainConfig asks for, and checks that the
// data fits the model (sample shape, dtype, number of classes) before training starts.
#pragma once

#include <memory>

#include "data/loader.h"
#include "train/config.h"
#include "train/model_spec.h"

namespace braid::train {

struct DataLoaders {
  std::unique_ptr<data::Loader> train;
  std::unique_ptr<data::Loader> eval;
};

DataLoaders make_loaders(const TrainConfig& config, const BuiltModel& model);

}  // namespace braid::train
