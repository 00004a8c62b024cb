// Models from data: a JSON description (input shape and a list of layers, residual blocks
// nested; or a graph of named nodes, below) becomes an nn::Sequential (an nn::Graph),
// validated layer by layer before any memory is allocated. Input sizes (in_features, in_channels,
// normalised sizes) are inferred from the running shape; a layer that cannot take the shape is an
// error naming the layer's index, its type and both shapes. The built-in models are specs too,
// except gpt-tiny. "input" is one sample's shape in braid's layout, which is NHWC for images: [H,
// W, C] (a 28x28 grey image is [28, 28, 1]); [F] for feature vectors, [T] for token ids. Image data
// in PyTorch's [N, C, H, W] order is transposed on load (data/npy.h, the config's npy_layout), so
// the spec is [H, W, C] whichever order the files hold.
//
//   {"input": [28, 28, 1],
//    "layers": [{"type": "conv2d", "out_channels": 32, "kernel": 3}, {"type": "relu"},
//               {"type": "maxpool2d", "kernel": 2}, {"type": "flatten"},
//               {"type": "linear", "out_features": 10}]}
//
// A graph instead of a chain: "nodes" in place of "layers", built into an nn::Graph
// (nn/graph.h) by train/model_graph.cpp. Each node has a unique "name" (letters, digits,
// '_'; not "input"), a "type" and "inputs": names of the model's "input" or of nodes listed
// before it (default: the node before it, or the input for the first). Every layer type of
// the chain is a node type with the same keys and reads one input; two more read 2+:
// "add" (elementwise sum, equal shapes) and "concat" (along "axis" of one sample, default
// -1, the last: an image's channels in NHWC; equal shapes elsewhere). "output" names the
// node whose output is the model's (default: the last). Errors name the node and its type
// ("node 'b' (conv2d)"): an unknown or later input (the nodes are in topological order, so
// a cycle is a read of a later node), a duplicate name, a shape a node cannot take, and a
// node nothing reads that is not the output (an error, not a warning: it would never
// learn). Parameters are "<node>.<param>" ("stem.weight").
//
//   {"input": [28, 28, 1],
//    "nodes": [{"name": "stem", "type": "conv2d", "out_channels": 16, "kernel": 3, "padding": 1},
//              {"name": "a", "type": "relu"},
//              {"name": "b", "type": "conv2d", "out_channels": 16, "kernel": 3, "padding": 1},
//              {"name": "sum", "type": "add", "inputs": ["a", "b"]},
//              {"name": "cat", "type": "concat", "inputs": ["sum", "stem"]},
//              {"name": "flat", "type": "flatten"},
//              {"name": "logits", "type": "linear", "out_features": 10}],
//    "output": "logits"}
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
