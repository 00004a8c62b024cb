#include "train/loss_setup.h"

#include "core/error.h"

namespace braid::train {

LossTask loss_task(const std::string& loss) {
  if (loss == "cross_entropy") return LossTask::classification;
  if (loss == "bce_with_logits") return LossTask::multi_label;
  return LossTask::regression;
}

std::shared_ptr<const nn::LossFunction> make_train_loss(const TrainConfig& config) {
  if (config.loss == "cross_entropy" && config.loss_class_weights.empty()) return nullptr;
  const std::vector<float> weights(config.loss_class_weights.begin(),
                                   config.loss_class_weights.end());
  return nn::make_loss(config.loss, static_cast<float>(config.label_smoothing), weights,
                       static_cast<float>(config.huber_delta));
}

void check_loss_fits(const TrainConfig& config, const BuiltModel& model, const data::Source& data,
                     const char* what) {
  const int64_t outputs = model.num_classes;  // the logits' last dimension
  const auto weights = static_cast<int64_t>(config.loss_class_weights.size());
  BRAID_CHECK(weights == 0 || weights == outputs, "loss_class_weights holds ", weights,
              " weights but the model has ", outputs, " classes; give one weight per class");
  if (loss_task(config) == LossTask::classification) {
    BRAID_CHECK(data.target_dtype() == DType::i32,
                "loss cross_entropy takes class labels, but the ", what, " targets are numbers (",
                dtype_name(data.target_dtype()), " ", data.target_shape().str(),
                " a sample); set loss to mse, l1, huber or bce_with_logits, or save the labels as "
                "integers");
    return;
  }
  BRAID_CHECK(model.task == Task::classification, "loss ", config.loss,
              " takes a model whose output is [batch, values], not a language model's");
  BRAID_CHECK(data.target_dtype() == DType::f32, "loss ", config.loss,
              " takes numeric targets, but the ", what, " targets are class labels (",
              dtype_name(data.target_dtype()),
              config.dataset == "npy" ? "); save the npy labels as float32"
                                      : "); use csv_targets or a numeric csv_label column");
  const int64_t per_sample = data.target_shape().numel();
  BRAID_CHECK(per_sample == outputs, "loss ", config.loss, ": the model outputs ", outputs,
              outputs == 1 ? " value" : " values", " per sample but the ", what, " targets have ",
              per_sample,
              "; end the model in {\"type\": \"linear\", \"out_features\": ", per_sample, "}");
}

}  // namespace braid::train
