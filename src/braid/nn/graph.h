// Graph: modules wired as a directed acyclic graph of named nodes, where a Sequential is a
// chain. Each node reads the model's input or earlier nodes' outputs and is one of:
//   - a module with one input (any layer, a Sequential, a Residual);
//   - add: the elementwise sum of 2+ inputs of one shape;
//   - concat: 2+ inputs joined along one dimension (their shapes equal elsewhere).
// Nodes are kept in topological order: a node's inputs come before it (checked by the
// constructor), so forward runs them in order and backward in reverse.
//
// Backward: the gradient of a node's output is the sum over its consumers. A node read
// once passes its consumer's dL/dx on without a copy; one read by several (a fan-out, the
// model input included) sums them into a buffer kept in the cache, so a steady step
// allocates nothing. A node with nothing learnable upstream of it (no parameters, and no
// input gradient asked for) runs no backward, as Sequential skips the layers in front of
// its first with parameters.
//
// Parameters are declared node by node under "<prefix><node name>.", so a state_dict reads
// "stem.weight", "block.body.0.weight", and become final in reverse declaration order
// (each node's after its backward), as the gradient buckets expect. Every node's
// parameters are announced (ParamSet::about_to_use) before its forward.
//
// A Graph cannot be cut into pipeline stages or by width: pipeline_units() is empty, and
// the pipeline and tensor-parallel strategies refuse it naming the model "Graph".
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"
#include "nn/params.h"

namespace braid::nn {

enum class GraphOp { module, add, concat };

struct GraphNode {
  std::string name;  // unique; its parameters are named "<name>.<param>"
  GraphOp op = GraphOp::module;
  std::unique_ptr<Module> module;  // op == module only
  std::vector<int> inputs;         // kGraphInput or the index of an earlier node
  int axis = -1;                   // concat: the dimension of the batched tensor, >= 1
};

class Graph : public Module {
 public:
  static constexpr int kGraphInput = -1;

  // `output`: the index of the node whose output is the model's. Throws braid::Error on a
  // node whose inputs do not come before it, a module node without exactly one input, or
  // a join without two or more.
  Graph(std::vector<GraphNode> nodes, int output);

  size_t size() const { return nodes_.size(); }
  const GraphNode& node(size_t i) const { return nodes_[i]; }
  int output() const { return output_; }

  std::string_view kind() const override { return "Graph"; }
  void declare(ParamSet& params, const std::string& prefix) override;
  void init(Rng& rng) override;
  Shape output_shape(const Shape& in) const override;
  // Every node's output shape for input shape `in`, in node order.
  std::vector<Shape> node_shapes(const Shape& in) const;
  std::unique_ptr<Cache> make_cache() const override;
  // out: the output node's forward output.
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  // dy: dL/d(output node); returns dL/dx (summed over the nodes that read the input).
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;
  double forward_flops(const Shape& in) const override;
  bool reports_ready() const override { return true; }
  bool announces_use() const override { return true; }

 private:
  // Slot 0 is the model input, slot i + 1 node i's output.
  static size_t slot(int input) { return static_cast<size_t>(input + 1); }
  // Whether backward must produce dL/d(slot): something learns upstream of it.
  bool needs_grad(size_t s, bool need_dx) const {
    return learns_upstream_[s] || (need_dx && reads_input_[s]);
  }

  std::vector<GraphNode> nodes_;
  int output_;
  std::vector<bool> reads_input_;  // per slot: depends on the model input (all do)
  // Per slot: a node with parameters at or upstream of it. Until declare() runs, every
  // node is assumed to have some.
  std::vector<bool> learns_upstream_;
  std::vector<std::pair<ParamSet::Id, ParamSet::Id>> node_params_;  // from declare()
  ParamSet* params_ = nullptr;
};

}  // namespace braid::nn
