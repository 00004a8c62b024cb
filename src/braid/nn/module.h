// Module: a layer or a composition of layers with an explicit forward/backward pair.
//
// Life cycle: construct (sizes) -> declare(params, prefix) registers parameters ->
// ParamSet::allocate() -> init(rng) writes PyTorch's default initial values -> any number
// of forward/backward calls.
//
// Saved activations live in a Cache that the caller owns (one per micro-batch in flight),
// made by make_cache(). forward() writes its output into the cache and returns it; the
// input x must stay alive and unchanged until the matching backward(). backward() adds
// dL/dparams into the gradient views (it never overwrites them) and returns dL/dx, also
// kept in the cache, or an undefined Tensor when need_dx is false (the first layer skips
// that GEMM). Outputs are reused across steps via Tensor::ensure, so a steady-state step
// allocates nothing.
//
// A Module is not thread-safe; distinct caches may not be used concurrently either,
// since backward accumulates into the shared gradient buffer.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "nn/params.h"

namespace braid::nn {

enum class Mode { train, eval };

// The arithmetic of GEMMs (Linear, the GPT's head, convolutions): fp32, or bf16 operands
// with fp32 accumulation and fp32 outputs (autocast; the parameters and their gradients
// stay fp32, the optimizer's master copy), or fp16 operands likewise (Linear and the head;
// overflows to inf past 65504, which loss scaling catches). Everything else
// (normalisation, softmax, losses) is fp32.
enum class Precision { fp32, bf16, fp16 };

struct ForwardContext {
  Mode mode = Mode::train;
  // Randomness for this forward pass (dropout); a module forks it with its own id so
  // masks are a pure function of (seed, step, module).
  Rng rng = Rng();
  Precision precision = Precision::fp32;
};

class Cache {
 public:
  virtual ~Cache() = default;
  Tensor x;    // the input seen by forward, when backward needs it
  Tensor out;  // forward's output
  Tensor dx;   // backward's dL/dx
};

class Module;

// One layer of a model seen as the sequence its forward runs (Module::pipeline_units), for a
// pipeline to cut into stages.
struct PipelineUnit {
  Module* module = nullptr;
  std::string name;                 // "embedding", "h.3", "head"; "0", "1", ... in Sequential
  ParamSet::Id first = 0, end = 0;  // the parameters it declared
  size_t buffers_first = 0, buffers_end = 0;  // its named buffers (BatchNorm's statistics)
  // Parameters declared by another unit that this one reads too: the GPT's head reads the
  // embedding's wte (tied weights).
  std::vector<ParamSet::Id> tied;
};

class Module {
 public:
  virtual ~Module() = default;

  virtual std::string_view kind() const = 0;  // "Linear", "Conv2d", ...
  virtual void declare(ParamSet& params, const std::string& prefix) {
    (void)params;
    (void)prefix;
  }
  virtual void init(Rng& rng) { (void)rng; }
  // Output shape for an input shape (batch dimension first). Throws an error naming the
  // layer and both shapes when the input does not fit.
  virtual Shape output_shape(const Shape& in) const = 0;
  virtual std::unique_ptr<Cache> make_cache() const { return std::make_unique<Cache>(); }
  virtual const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) = 0;
  virtual const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) = 0;
  // Whether backward() reports its own parameters final (ParamSet::mark_ready) as it goes,
  // as containers do; a container reports the ranges of children that do not.
  virtual bool reports_ready() const { return false; }
  // Whether forward() announces every parameter before reading it
  // (ParamSet::about_to_use), as containers do for their children; a strategy whose
  // parameters arrive during forward must otherwise have them all in place first.
  virtual bool announces_use() const { return false; }
  // After declare(): the units whose forwards chained in order are this module's forward,
  // and whose backwards in reverse order are its backward (a unit that does not report
  // its own range final, reports_ready(), is followed by mark_ready of its range; none
  // needs dL/dx below the first unit with parameters). Empty: the model cannot be cut.
  virtual std::vector<PipelineUnit> pipeline_units() { return {}; }
  // Multiply-adds x2 of one forward pass over a batch of shape `in`, for GFLOP/s figures.
  virtual double forward_flops(const Shape& in) const {
    (void)in;
    return 0;
  }
};

// An undefined tensor for backward() to return when need_dx is false.
const Tensor& no_grad();

}  // namespace braid::nn
