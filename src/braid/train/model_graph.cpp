#include "train/model_graph.h"

#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "nn/graph_join.h"
#include "train/suggest.h"

namespace braid::train::spec {
namespace {

using nlohmann::json;

constexpr int kInput = nn::Graph::kGraphInput;

bool valid_name(const std::string& name) {
  if (name.empty()) return false;
  for (char ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_') return false;
  return true;
}

// What the graph knows of each name so far: its index (kInput for "input"), shape and
// description for errors ("node 'stem' (conv2d)").
struct Known {
  int index;
  Shape shape;
  std::string where;
};

// The node's "inputs" as indices, each checked to name the input or an earlier node.
std::vector<int> read_inputs(const json& node, const std::string& where,
                             const std::map<std::string, Known>& known,
                             const std::vector<std::string>& later, const std::string& previous) {
  if (!node.contains("inputs")) return {known.at(previous).index};
  const json& list = node["inputs"];
  BRAID_CHECK(list.is_array() && !list.empty(), "model: ", where,
              ": 'inputs' must be a non-empty list of names (\"input\" or earlier nodes)");
  std::vector<int> out;
  for (const json& name : list) {
    BRAID_CHECK(name.is_string(), "model: ", where, ": 'inputs' must list names, got ",
                name.dump());
    const std::string n = name.get<std::string>();
    auto it = known.find(n);
    if (it != known.end()) {
      out.push_back(it->second.index);
      continue;
    }
    for (const std::string& l : later)
      BRAID_CHECK(l != n, "model: ", where, " reads '", n,
                  "', which is not listed before it; list every node after the nodes it reads "
                  "(a model graph has no cycles)");
    std::vector<std::string> names;
    for (const auto& [k, v] : known) names.push_back(k);
    const std::string near = closest_match(n, names);
    BRAID_THROW(Error, "model: ", where, " reads '", n, "', which is no node",
                near.empty() ? std::string() : "; did you mean '" + near + "'?",
                " (\"input\" is the model's input)");
  }
  return out;
}

// An "add" or "concat" node; its keys and its inputs' shapes checked.
nn::GraphNode build_join(const json& node, const std::string& type, const std::string& where,
                         const std::vector<Shape>& in, Shape& shape) {
  nn::GraphNode g;
  g.op = type == "add" ? nn::GraphOp::add : nn::GraphOp::concat;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string& k = it.key();
    BRAID_CHECK(k == "name" || k == "type" || k == "inputs" || (k == "axis" && type == "concat"),
                "model: ", where, ": unknown key '", k, "'");
  }
  BRAID_CHECK(in.size() >= 2, "model: ", where, " needs at least 2 'inputs', got ", in.size());
  const int rank = in[0].rank() - 1;  // one sample's
  if (g.op == nn::GraphOp::concat) {
    const json axis = node.value("axis", json(-1));
    BRAID_CHECK(
        axis.is_number_integer() && axis.get<int64_t>() >= -rank && axis.get<int64_t>() < rank,
        "model: ", where, ": 'axis' must be an integer in [", -rank, ", ", rank - 1,
        "] for inputs of ", rank,
        " dimensions per sample (-1, the last, is channels "
        "for an image), got ",
        axis.dump());
    const int a = static_cast<int>(axis.get<int64_t>());
    g.axis = (a < 0 ? a + rank : a) + 1;  // past the batch dimension
  }
  // add_shape and concat_shape name the node and all the shapes.
  shape = g.op == nn::GraphOp::add ? nn::add_shape(in, "model: " + where)
                                   : nn::concat_shape(in, g.axis, "model: " + where);
  return g;
}

}  // namespace

std::unique_ptr<nn::Graph> build_graph(const json& nodes, const json& output, Shape& shape,
                                       Budget& budget) {
  BRAID_CHECK(nodes.is_array() && !nodes.empty(), "model: 'nodes' must be a non-empty list");
  // Names first, so a read of a later node is told apart from a read of no node.
  std::vector<std::string> names;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const json& n = nodes[i];
    const std::string at = "node " + std::to_string(i);
    BRAID_CHECK(n.is_object() && n.contains("name") && n["name"].is_string() &&
                    n.contains("type") && n["type"].is_string(),
                "model: ", at, " must be an object with a string 'name' and a string 'type'");
    const std::string name = n["name"];
    BRAID_CHECK(valid_name(name) && name != "input", "model: ", at, ": name '", name,
                "' must be letters, digits and '_' (it prefixes the node's parameter names), "
                "and not 'input' (the model's input)");
    for (const std::string& earlier : names)
      BRAID_CHECK(earlier != name, "model: ", at, ": name '", name,
                  "' is taken by an earlier node; names are unique");
    names.push_back(name);
  }
  std::map<std::string, Known> known{{"input", {kInput, shape, "the input"}}};
  std::vector<nn::GraphNode> built;
  std::vector<int> readers(nodes.size(), 0);
  std::string previous = "input";
  for (size_t i = 0; i < nodes.size(); ++i) {
    const json& n = nodes[i];
    const std::string type = n["type"];
    const std::string where = "node '" + names[i] + "' (" + type + ")";
    const std::vector<std::string> later(names.begin() + static_cast<long>(i), names.end());
    const std::vector<int> inputs = read_inputs(n, where, known, later, previous);
    std::vector<Shape> in;
    for (int k : inputs) {
      in.push_back(k == kInput ? known.at("input").shape : known.at(names[size_t(k)]).shape);
      if (k != kInput) ++readers[size_t(k)];
    }
    nn::GraphNode g;
    Shape out;
    if (type == "add" || type == "concat") {
      g = build_join(n, type, where, in, out);
    } else {
      BRAID_CHECK(inputs.size() == 1, "model: ", where, " is a layer and reads one input, got ",
                  inputs.size(), "; join several with an 'add' or 'concat' node first");
      json layer = n;
      layer.erase("name");
      layer.erase("inputs");
      budget.previous =
          inputs[0] == kInput ? "the input" : known.at(names[size_t(inputs[0])]).where;
      out = in[0];
      g.module = build_layer(layer, out, "node '" + names[i] + "'", budget);
    }
    g.name = names[i];
    g.inputs = inputs;
    built.push_back(std::move(g));
    known[names[i]] = {static_cast<int>(i), out, where};
    previous = names[i];
  }
  int out_index = static_cast<int>(nodes.size()) - 1;
  if (!output.is_null()) {
    BRAID_CHECK(output.is_string(), "model: 'output' must be a node's name, got ", output.dump());
    auto it = known.find(output.get<std::string>());
    BRAID_CHECK(it != known.end() && it->second.index != kInput, "model: 'output' names '",
                output.get<std::string>(), "', which is no node");
    out_index = it->second.index;
  }
  for (size_t i = 0; i < nodes.size(); ++i)
    BRAID_CHECK(readers[i] > 0 || static_cast<int>(i) == out_index, "model: node '", names[i],
                "' (", nodes[i]["type"].get<std::string>(),
                ") is not used: no node reads it and it is not the 'output' (",
                names[size_t(out_index)], "); remove it or name it in an 'inputs' list");
  shape = known.at(names[size_t(out_index)]).shape;
  budget.previous = known.at(names[size_t(out_index)]).where;
  return std::make_unique<nn::Graph>(std::move(built), out_index);
}

}  // namespace braid::train::spec
