#include "nn/graph.h"

#include "core/error.h"
#include "core/kernels.h"
#include "nn/graph_join.h"

namespace braid::nn {
namespace {

class GraphCache : public Cache {
 public:
  std::vector<std::unique_ptr<Cache>> nodes;  // a module node's own cache; out for a join
  std::vector<std::vector<Tensor>> parts;     // concat's gradient for each input
  // Per slot (0: the input, i + 1: node i), valid during one forward / backward:
  std::vector<const Tensor*> outs;
  std::vector<const Tensor*> grads;    // dL/d(slot) summed so far; null: none yet
  std::vector<Tensor> sums;            // where a slot read by several nodes sums its gradients
  std::vector<const Tensor*> join_in;  // scratch: a join's inputs
  std::vector<Shape> join_shapes;      // scratch: their shapes
  std::vector<bool> want;              // scratch: which of them need a gradient
};

const char* op_name(GraphOp op) {
  switch (op) {
    case GraphOp::module:
      return "module";
    case GraphOp::add:
      return "add";
    case GraphOp::concat:
      return "concat";
  }
  return "?";
}

std::string where(const GraphNode& n) {
  return "Graph: node '" + n.name + "' (" +
         (n.op == GraphOp::module ? std::string(n.module->kind()) : op_name(n.op)) + ")";
}

// Adds g into the gradient of slot s: the first contribution is kept by reference, a second
// one copies it into the slot's own buffer and sums there.
void accumulate(GraphCache& c, size_t s, const Tensor& g) {
  if (c.grads[s] == nullptr) {
    c.grads[s] = &g;
    return;
  }
  Tensor& sum = c.sums[s];
  if (c.grads[s] != &sum) {
    sum.ensure(g.shape(), DType::f32, MemCategory::activation_grads);
    sum.copy_from(*c.grads[s]);
    c.grads[s] = &sum;
  }
  add_inplace(g.f32(), sum.f32(), g.numel());
}

}  // namespace

Graph::Graph(std::vector<GraphNode> nodes, int output) : nodes_(std::move(nodes)), output_(output) {
  BRAID_CHECK(!nodes_.empty(), "Graph: no nodes");
  BRAID_CHECK(output_ >= 0 && output_ < static_cast<int>(nodes_.size()), "Graph: output node ",
              output_, " out of range [0, ", nodes_.size(), ")");
  reads_input_.assign(nodes_.size() + 1, false);
  reads_input_[0] = true;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const GraphNode& n = nodes_[i];
    if (n.op == GraphOp::module)
      BRAID_CHECK(n.module && n.inputs.size() == 1, "Graph: node '", n.name,
                  "' is a module and takes exactly one input, got ", n.inputs.size());
    else
      BRAID_CHECK(n.inputs.size() >= 2, where(n), " needs at least 2 inputs, got ",
                  n.inputs.size());
    for (int in : n.inputs) {
      BRAID_CHECK(in >= kGraphInput && in < static_cast<int>(i), "Graph: node '", n.name,
                  "' reads node ", in, ", which does not come before it");
      if (reads_input_[slot(in)]) reads_input_[i + 1] = true;
    }
  }
  learns_upstream_.assign(nodes_.size() + 1, true);
  learns_upstream_[0] = false;
}

void Graph::declare(ParamSet& params, const std::string& prefix) {
  params_ = &params;
  node_params_.clear();
  learns_upstream_.assign(nodes_.size() + 1, false);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const ParamSet::Id before = params.layout().size();
    if (nodes_[i].module) nodes_[i].module->declare(params, prefix + nodes_[i].name + ".");
    node_params_.emplace_back(before, params.layout().size());
    bool learns = params.layout().size() > before;
    for (int in : nodes_[i].inputs) learns = learns || learns_upstream_[slot(in)];
    learns_upstream_[i + 1] = learns;
  }
}

void Graph::init(Rng& rng) {
  for (auto& n : nodes_)
    if (n.module) n.module->init(rng);
}

std::vector<Shape> Graph::node_shapes(const Shape& in) const {
  std::vector<Shape> out;  // per node
  std::vector<Shape> ins;
  auto shape_of = [&](int input) { return input == kGraphInput ? in : out[size_t(input)]; };
  for (const GraphNode& n : nodes_) {
    ins.clear();
    for (int i : n.inputs) ins.push_back(shape_of(i));
    switch (n.op) {
      case GraphOp::module:
        out.push_back(n.module->output_shape(ins[0]));
        break;
      case GraphOp::add:
        out.push_back(add_shape(ins, where(n)));
        break;
      case GraphOp::concat:
        out.push_back(concat_shape(ins, n.axis, where(n)));
        break;
    }
  }
  return out;
}

Shape Graph::output_shape(const Shape& in) const { return node_shapes(in)[size_t(output_)]; }

std::unique_ptr<Cache> Graph::make_cache() const {
  auto c = std::make_unique<GraphCache>();
  for (const GraphNode& n : nodes_)
    c->nodes.push_back(n.module ? n.module->make_cache() : std::make_unique<Cache>());
  c->parts.resize(nodes_.size());
  c->outs.assign(nodes_.size() + 1, nullptr);
  c->grads.assign(nodes_.size() + 1, nullptr);
  c->sums.resize(nodes_.size() + 1);
  return c;
}

const Tensor& Graph::forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) {
  auto& c = static_cast<GraphCache&>(cache);
  c.outs[0] = &x;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    GraphNode& n = nodes_[i];
    Cache& nc = *c.nodes[i];
    if (n.op == GraphOp::module) {
      if (params_ != nullptr && i < node_params_.size())
        params_->about_to_use(node_params_[i].first, node_params_[i].second);
      c.outs[i + 1] = &n.module->forward(*c.outs[slot(n.inputs[0])], nc, ctx);
      continue;
    }
    c.join_in.clear();
    for (int in : n.inputs) {
      BRAID_CHECK(c.outs[slot(in)]->dtype() == DType::f32, where(n), " joins f32 tensors only");
      c.join_in.push_back(c.outs[slot(in)]);
    }
    if (n.op == GraphOp::add)
      add_forward(c.join_in, nc.out);
    else
      concat_forward(c.join_in, n.axis, nc.out);
    c.outs[i + 1] = &nc.out;
  }
  return *c.outs[slot(output_)];
}

// Nodes run in reverse order, so every consumer of a node has added its part of the
// node's gradient before the node runs. A module node that does not report its own
// parameters final is followed by mark_ready of its range.
const Tensor& Graph::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  auto& c = static_cast<GraphCache&>(cache);
  std::fill(c.grads.begin(), c.grads.end(), nullptr);
  accumulate(c, slot(output_), dy);
  for (size_t i = nodes_.size(); i-- > 0;) {
    if (!needs_grad(i + 1, need_dx)) continue;
    GraphNode& n = nodes_[i];
    const Tensor* g = c.grads[i + 1];
    // Invariant: every node feeds the output (Graph's users check), so its gradient is set.
    BRAID_CHECK(g != nullptr, where(n), " feeds nothing the output reads");
    Cache& nc = *c.nodes[i];
    if (n.op == GraphOp::module) {
      const size_t in = slot(n.inputs[0]);
      const bool want = needs_grad(in, need_dx);
      const Tensor& dx = n.module->backward(*g, nc, want);
      if (params_ != nullptr && i < node_params_.size() && !n.module->reports_ready())
        params_->mark_ready(node_params_[i].first, node_params_[i].second);
      if (want) accumulate(c, in, dx);
    } else if (n.op == GraphOp::add) {
      for (int in : n.inputs)
        if (needs_grad(slot(in), need_dx)) accumulate(c, slot(in), *g);
    } else {
      c.join_shapes.clear();
      c.want.clear();
      for (int in : n.inputs) {
        c.join_shapes.push_back(c.outs[slot(in)]->shape());
        c.want.push_back(needs_grad(slot(in), need_dx));
      }
      concat_backward(*g, c.join_shapes, n.axis, c.want, c.parts[i]);
      for (size_t k = 0; k < n.inputs.size(); ++k)
        if (c.want[k]) accumulate(c, slot(n.inputs[k]), c.parts[i][k]);
    }
  }
  return need_dx ? *c.grads[0] : no_grad();
}

double Graph::forward_flops(const Shape& in) const {
  const std::vector<Shape> shapes = node_shapes(in);
  double total = 0;
  for (const GraphNode& n : nodes_)
    if (n.module)
      total +=
          n.module->forward_flops(n.inputs[0] == kGraphInput ? in : shapes[size_t(n.inputs[0])]);
  return total;
}

}  // namespace braid::nn
