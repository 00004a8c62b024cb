// Models from data: a JSON description (input shape and a list of layers, residual blocks
// nested) becomes an nn::Sequential, validated layer by layer before any memory is
// allocated. Input sizes (in_features, in_channels, normalised sizes) are inferred from
// the running shape; a layer that cannot take the shape is an error naming the layer's
// index, its type and both shapes. The built-in models are specs too, except gpt-tiny.
// "input" is one sample's shape in braid's layout, which is NHWC for images: [H, W, C]
// (a 28x28 grey image is [28, 28, 1]); [F] for feature vectors, [T] for token ids. Image
// data in PyTorch's [N, C, H, W] order is transposed on load (data/npy.h, the config's
// npy_layout), so the spec is [H, W, C] whichever order the files hold.
//
//   {"input": [28, 28, 1],
//    "layers": [{"type": "conv2d", "out_channels": 32, "kernel": 3}, {"type": "relu"},
//               {"type": "maxpool2d", "kernel": 2}, {"type": "flatten"},
//               {"type": "linear", "out_features": 10}]}
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/shape.h"
#include "nn/module.h"
#include "nn/stats_reducer.h"

namespace braid::train {

enum class Task { classification, language_model };

struct BuiltModel {
  std::unique_ptr<nn::Module> module;
  Shape sample_shape;              // one input sample, without the batch dimension
  DType input_dtype = DType::f32;  // i32 for token ids
  Task task = Task::classification;
  int64_t num_classes = 0;  // logits' last dimension
};

// How to build a model beyond what its spec says: what the running job adds.
struct ModelBuildOptions {
  // When set, every BatchNorm layer shares its statistics through it (SyncBatchNorm,
  // `sync_batchnorm: true`); null keeps them local.
  std::shared_ptr<nn::StatsReducer> batchnorm_reducer;
};

// `spec` is a built-in name (mlp, cnn, cnn-bn, gpt-tiny) or a spec object.
// Every layer's input shape is checked against what it takes, every size against
// [1, 2^31-1] and the parameters (16 bytes each in training) and one sample's
// activations against MemAvailable, each before the layer is constructed.
BuiltModel build_model(const nlohmann::json& spec, int64_t seq_len = 128,
                       const ModelBuildOptions& options = {});
// The same checks, for config validation: throws what build_model would.
void check_model_spec(const nlohmann::json& spec, int64_t seq_len);
nlohmann::json builtin_model_spec(const std::string& name);

}  // namespace braid::train
