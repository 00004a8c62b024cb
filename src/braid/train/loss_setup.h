// The config's training loss (the `loss`, `loss_class_weights` and `huber_delta` keys) built
// for the strategies, and the checks that the data and the model fit it before a step runs.
//
// A task is what the loss makes of the model's output [B, K]: classification (cross_entropy,
// i32 class labels, evaluated by accuracy), regression (mse, l1, huber: f32 targets [K] or,
// for K = 1, a scalar; evaluated by MSE and MAE over every element) or multi-label
// (bce_with_logits: f32 targets in [0, 1], one per output; evaluated by per-label accuracy,
// a logit > 0 against a target >= 0.5).
#pragma once

#include <memory>
#include <string>

#include "data/dataset.h"
#include "nn/loss_function.h"
#include "train/config.h"
#include "train/model_spec.h"

namespace braid::train {

enum class LossTask { classification, regression, multi_label };

LossTask loss_task(const std::string& loss);
inline LossTask loss_task(const TrainConfig& c) { return loss_task(c.loss); }

// Null for the default (cross_entropy without class weights), which every strategy ends in
// through its own built-in cross-entropy with label_smoothing; the loss otherwise.
std::shared_ptr<const nn::LossFunction> make_train_loss(const TrainConfig& config);

// Before training: the class weights' count against the model's classes, and the targets'
// dtype and size per sample against the model's outputs per sample. `what` names the data
// ("training"). Errors say which key or layer to change.
void check_loss_fits(const TrainConfig& config, const BuiltModel& model, const data::Source& data,
                     const char* what);

}  // namespace braid::train
