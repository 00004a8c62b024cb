// The per-layer builder that both model spec formats share (train/model_spec.h): the
// chain's "layers" and the graph's "nodes" build each layer through build_layer, so a
// layer type, its keys, its checks and its error messages are defined once. Internal to
// train/.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/shape.h"
#include "nn/module.h"
#include "nn/sequential.h"
#include "train/model_spec.h"

namespace braid::train::spec {

// Sizes a spec may name (channels, features, kernels, input dimensions). The product of a
// few of them stays far inside int64, so shapes and parameter counts cannot overflow
// before they are checked against memory.
constexpr int64_t kMaxSize = (int64_t{1} << 31) - 1;
constexpr double kGB = 1e9;

// What the layers built so far need, to refuse the layer that does not fit before its
// constructor allocates anything.
struct Budget {
  double parameters = 0;
  double limit_bytes = 0;
  std::string previous = "the input";          // who produced the current shape, for errors
  const ModelBuildOptions* options = nullptr;  // passed down with the budget to every layer
};

// Budget's limit: MemAvailable, or an assumed 1 TiB where /proc/meminfo cannot be read.
double available_bytes();

// One layer from its spec object ({"type": ..., keys}); `where` names it in errors ("layer
// 3", "node 'stem'"). `shape` is its input (batch first) and becomes its output. The
// layer's output per sample is checked against memory; budget.previous becomes its name.
std::unique_ptr<nn::Module> build_layer(const nlohmann::json& spec, Shape& shape,
                                        const std::string& where, Budget& budget);
// A chain of layers, as "layers" and a residual block's body and shortcut; `path` prefixes
// every layer's name in errors ("" at the top, "layer 2 (residual) > " inside a block).
std::unique_ptr<nn::Sequential> build_layers(const nlohmann::json& layers, Shape& shape,
                                             const std::string& path, Budget& budget);

}  // namespace braid::train::spec
