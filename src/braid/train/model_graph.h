// The graph format of a model spec (train/model_spec.h): "nodes", each named and reading
// the input or earlier nodes by name, becomes an nn::Graph. Every layer type of the chain
// format is a node type (built by spec::build_layer), plus "add" and "concat". Checked
// before anything is allocated: names (unique, [A-Za-z0-9_], not "input"), inputs (known,
// listed before the node: this also rules out cycles), shapes (naming the node, its type
// and the shapes), and that every node is used: a node no other node reads that is not
// the output is an error, since it would be computed and never learn (a typo in an
// "inputs" list, most likely).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>

#include "nn/graph.h"
#include "train/model_layer.h"

namespace braid::train::spec {

// `nodes`: the spec's "nodes"; `output`: its "output" (a node's name) or null for the last
// node. `shape` is the model input's (batch first) and becomes the output's; budget.previous
// names the output node.
std::unique_ptr<nn::Graph> build_graph(const nlohmann::json& nodes, const nlohmann::json& output,
                                       Shape& shape, Budget& budget);

}  // namespace braid::train::spec
