// Graph: a fan-out's gradients are summed, add and concat have the gradients of their
// definitions (central differences over a graph that has all three, the model input read
// twice included), a node with nothing learnable upstream runs no backward, and a steady
// step allocates nothing.
#include "nn/graph.h"

#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "core/memory.h"
#include "gradcheck.h"
#include "nn/activations.h"
#include "nn/conv2d.h"
#include "nn/flatten.h"
#include "nn/linear.h"

namespace braid::nn {
namespace {

using testing::expect_gradients_match;
using testing::random_input;

constexpr int kIn = Graph::kGraphInput;

GraphNode layer(std::string name, std::unique_ptr<Module> m, int input) {
  GraphNode n;
  n.name = std::move(name);
  n.module = std::move(m);
  n.inputs = {input};
  return n;
}

GraphNode join(std::string name, GraphOp op, std::vector<int> inputs, int axis = 3) {
  GraphNode n;
  n.name = std::move(name);
  n.op = op;
  n.inputs = std::move(inputs);
  n.axis = axis;
  return n;
}

// input [N, 5, 5, 3] -> stem conv (4) -> a = tanh -> b = conv(a) (4); sum = a + b;
// cat = [sum | stem | input] on channels (11) -> head conv 1x1 (2). The input, stem and a
// each feed two nodes.
std::unique_ptr<Graph> fan_out_graph() {
  std::vector<GraphNode> nodes;
  nodes.push_back(layer("stem", std::make_unique<Conv2d>(3, 4, 3, 1, 1), kIn));
  nodes.push_back(layer("a", std::make_unique<Tanh>(), 0));
  nodes.push_back(layer("b", std::make_unique<Conv2d>(4, 4, 3, 1, 1), 1));
  nodes.push_back(join("sum", GraphOp::add, {1, 2}));
  nodes.push_back(join("cat", GraphOp::concat, {3, 0, kIn}));
  nodes.push_back(layer("head", std::make_unique<Conv2d>(11, 2, 1), 4));
  return std::make_unique<Graph>(std::move(nodes), 5);
}

TEST(Graph, FanOutAddAndConcatGradientsMatchFiniteDifferences) {
  auto g = fan_out_graph();
  EXPECT_EQ(g->output_shape({2, 5, 5, 3}), Shape({2, 5, 5, 2}));
  expect_gradients_match(*g, random_input({2, 5, 5, 3}));
}

// Concat along a middle axis (height) of three inputs, one of them read twice, and add of
// three: offsets that are not the last dimension's.
TEST(Graph, ConcatAlongHeightAndAddOfThreeMatchFiniteDifferences) {
  std::vector<GraphNode> nodes;
  nodes.push_back(layer("c", std::make_unique<Conv2d>(2, 3, 3, 1, 1), kIn));
  nodes.push_back(layer("t", std::make_unique<Tanh>(), 0));
  nodes.push_back(join("cat", GraphOp::concat, {0, 1, 0}, 1));  // [N, 12, 4, 3]
  nodes.push_back(layer("d", std::make_unique<Conv2d>(3, 3, 3, 1, 1), 2));
  nodes.push_back(join("sum", GraphOp::add, {2, 3, 2}));
  Graph g(std::move(nodes), 4);
  EXPECT_EQ(g.output_shape({2, 4, 4, 2}), Shape({2, 12, 4, 3}));
  expect_gradients_match(g, random_input({2, 4, 4, 2}));
}

TEST(Graph, ParametersAreNamedByNode) {
  auto g = fan_out_graph();
  ParamSet params;
  g->declare(params, "");
  std::vector<std::string> names;
  for (const auto& p : params.layout()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"stem.weight", "stem.bias", "b.weight", "b.bias",
                                             "head.weight", "head.bias"}));
}

// Identity that records how backward was called.
class Spy : public Module {
 public:
  std::string_view kind() const override { return "Spy"; }
  Shape output_shape(const Shape& in) const override { return in; }
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext&) override {
    cache.out = x;
    return cache.out;
  }
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override {
    calls.push_back(need_dx);
    cache.dx = dy;
    return need_dx ? cache.dx : no_grad();
  }
  std::vector<bool> calls;
};

// A node in front of the first node with parameters runs no backward, and the first node
// with parameters is asked for no input gradient, when the caller needs none; the weight
// gradients are those of a full backward, bit for bit.
TEST(Graph, NoBackwardInFrontOfTheFirstNodeThatLearns) {
  auto spy = std::make_unique<Spy>();
  Spy* pre = spy.get();
  std::vector<GraphNode> nodes;
  nodes.push_back(layer("pre", std::move(spy), kIn));
  nodes.push_back(layer("f", std::make_unique<Flatten>(), 0));
  nodes.push_back(layer("l", std::make_unique<Linear>(12, 5), 1));
  nodes.push_back(layer("r", std::make_unique<Tanh>(), 2));
  nodes.push_back(join("sum", GraphOp::add, {2, 3}));
  Graph g(std::move(nodes), 4);
  ParamSet params;
  g.declare(params, "");
  params.allocate();
  Rng rng(1);
  g.init(rng);
  auto cache = g.make_cache();
  const Tensor x = random_input({3, 2, 2, 3});
  const Tensor dy = random_input({3, 5}, 9);
  g.forward(x, *cache, ForwardContext());
  params.zero_grads();
  EXPECT_FALSE(g.backward(dy, *cache, false).defined());
  EXPECT_EQ(pre->calls, std::vector<bool>{});
  const std::vector<float> skipped(params.grads(), params.grads() + params.size());
  params.zero_grads();
  const Tensor& dx = g.backward(dy, *cache, true);
  EXPECT_EQ(dx.shape(), x.shape());
  EXPECT_EQ(pre->calls, std::vector<bool>{true});
  EXPECT_EQ(0, std::memcmp(skipped.data(), params.grads(), sizeof(float) * skipped.size()));
}

TEST(Graph, SteadyStepAllocatesNothing) {
  auto g = fan_out_graph();
  ParamSet params;
  g->declare(params, "");
  params.allocate();
  Rng rng(1);
  g->init(rng);
  auto cache = g->make_cache();
  const Tensor x = random_input({2, 5, 5, 3});
  const Tensor dy = random_input({2, 5, 5, 2}, 4);
  for (int step = 0; step < 2; ++step) {
    const int64_t before = MemoryTracker::process().allocations();
    g->forward(x, *cache, ForwardContext());
    g->backward(dy, *cache, true);
    if (step == 1) {
      EXPECT_EQ(MemoryTracker::process().allocations(), before);
    }
  }
}

// Each node's parameters are reported final once, after its backward: in reverse
// declaration order, as the gradient buckets expect.
TEST(Graph, ReportsEachNodesParametersFinalInReverseOrder) {
  auto g = fan_out_graph();
  ParamSet params;
  g->declare(params, "");
  params.allocate();
  Rng rng(1);
  g->init(rng);
  std::vector<int64_t> heard;
  params.add_ready_listener([&](int64_t begin, int64_t end) {
    if (end > begin) heard.push_back(begin);
  });
  auto cache = g->make_cache();
  const Tensor x = random_input({2, 5, 5, 3});
  g->forward(x, *cache, ForwardContext());
  params.zero_grads();
  params.begin_backward();
  g->backward(random_input({2, 5, 5, 2}, 4), *cache, false);
  params.finish_backward();
  const std::vector<int64_t> expected{params.range_begin(4), params.range_begin(2),
                                      params.range_begin(0)};
  EXPECT_EQ(heard, expected);
}

TEST(Graph, RefusesNodesOutOfOrderAndWrongInputCounts) {
  auto make = [](int input, GraphOp op, std::vector<int> join_inputs) {
    std::vector<GraphNode> nodes;
    nodes.push_back(layer("a", std::make_unique<Tanh>(), input));
    nodes.push_back(join("j", op, std::move(join_inputs)));
    return Graph(std::move(nodes), 1);
  };
  EXPECT_THROW(make(0, GraphOp::add, {0, 0}), Error);    // a reads itself
  EXPECT_THROW(make(kIn, GraphOp::add, {0}), Error);     // add of one
  EXPECT_THROW(make(kIn, GraphOp::add, {0, 1}), Error);  // j reads itself
  EXPECT_NO_THROW(make(kIn, GraphOp::add, {0, kIn}));
}

}  // namespace
}  // namespace braid::nn
