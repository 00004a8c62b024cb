#include "nn/sequential_tensor_parallel.h"

#include "nn/activations.h"
#include "nn/flatten.h"
#include "nn/gelu.h"
#include "nn/parallel_linear.h"

namespace braid::nn {
namespace {

bool elementwise(const Module& m) {
  const std::string_view k = m.kind();
  return k == "ReLU" || k == "Tanh" || k == "Sigmoid" || k == "GELU";
}

std::unique_ptr<Module> copy_of(const Module& m, size_t index) {
  const std::string_view k = m.kind();
  if (k == "ReLU") return std::make_unique<ReLU>();
  if (k == "Tanh") return std::make_unique<Tanh>();
  if (k == "Sigmoid") return std::make_unique<Sigmoid>();
  if (k == "GELU") return std::make_unique<Gelu>(static_cast<const Gelu&>(m).approximate());
  if (k == "Flatten") return std::make_unique<Flatten>();
  BRAID_THROW(Error, "tensor parallel: layer ", index, " (", k,
              ") of the Sequential model cannot be cut by width; a width-cut Sequential model "
              "holds Flatten, Linear, ReLU, Tanh, Sigmoid and GELU layers");
}

}  // namespace

WidthCutModel cut_sequential(const Sequential& full, TensorReducer& reducer) {
  const int T = reducer.size(), t = reducer.rank();
  const size_t n = full.size();
  std::vector<std::unique_ptr<Module>> children(n);
  WidthCutModel out;
  for (size_t i = 0; i < n; ++i) {
    const auto* first = dynamic_cast<const Linear*>(&full[i]);
    if (first == nullptr) {
      children[i] = copy_of(full[i], i);
      continue;
    }
    size_t j = i + 1;
    while (j < n && elementwise(full[j])) ++j;
    const auto* second = j < n ? dynamic_cast<const Linear*>(&full[j]) : nullptr;
    if (second == nullptr || first->out_features() % T != 0) {  // stays whole
      children[i] =
          std::make_unique<Linear>(first->in_features(), first->out_features(), first->has_bias());
      continue;
    }
    const int64_t part = first->out_features() / T;
    const std::string a = std::to_string(i) + ".", b = std::to_string(j) + ".";
    children[i] = std::make_unique<ColumnParallelLinear>(first->in_features(), part,
                                                         first->has_bias(), reducer);
    out.cuts.push_back({a + "weight", false, {{t * part, part}}});
    if (first->has_bias()) out.cuts.push_back({a + "bias", false, {{t * part, part}}});
    for (size_t k = i + 1; k < j; ++k) children[k] = copy_of(full[k], k);
    children[j] = std::make_unique<RowParallelLinear>(part, second->out_features(),
                                                      second->has_bias(), reducer);
    out.cuts.push_back({b + "weight", true, {{t * part, part}}});
    i = j;
  }
  out.model = std::make_unique<Sequential>(std::move(children));
  return out;
}

}  // namespace braid::nn
