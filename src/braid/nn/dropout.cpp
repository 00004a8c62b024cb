#include "nn/dropout.h"

#include <cmath>

#include "core/memory.h"
#include "core/multiversion.h"

namespace braid::nn {
namespace {

// FNV-1a: stable across compilers and runs, unlike std::hash, so masks are reproducible
// everywhere.
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

class DropoutCache : public Cache {
 public:
  Buffer mask;  // one byte per element: 1 kept, 0 dropped
  // Identity path taken: out (and then dx) are handles of the caller's tensors. They must
  // be dropped before ensure() or the next masked pass would write into the caller's memory.
  bool identity = false;
};

// keep[i] = 1 when the i-th word of the Philox stream (the order Rng::next_u32 returns
// them: block b gives words 4b..4b+3) is >= threshold, i.e. with probability 1 - p.
// Philox4x32-10 as in core/rng.cpp, inlined so the loop over blocks vectorises (one block
// per lane, 32x32->64 multiplies as vpmuludq); a call to philox4x32 per block costs several
// times more. The dropout test pins this to Rng, so the two cannot drift apart.
BRAID_MULTIVERSION void draw_mask(const Rng& rng, uint32_t threshold, uint8_t* keep, int64_t n) {
  constexpr uint32_t kM0 = 0xD2511F53, kM1 = 0xCD9E8D57;
  constexpr uint32_t kW0 = 0x9E3779B9, kW1 = 0xBB67AE85;
  const auto key0 = static_cast<uint32_t>(rng.seed());
  const auto key1 = static_cast<uint32_t>(rng.seed() >> 32);
  const auto s0 = static_cast<uint32_t>(rng.stream());
  const auto s1 = static_cast<uint32_t>(rng.stream() >> 32);
  const int64_t blocks = n / 4;
  for (int64_t b = 0; b < blocks; ++b) {
    uint32_t c0 = static_cast<uint32_t>(b), c1 = static_cast<uint32_t>(b >> 32), c2 = s0, c3 = s1;
    uint32_t k0 = key0, k1 = key1;
    for (int round = 0; round < 10; ++round) {
      const uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
      const uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
      c0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
      c2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
      c1 = static_cast<uint32_t>(p1);
      c3 = static_cast<uint32_t>(p0);
      k0 += kW0;
      k1 += kW1;
    }
    keep[4 * b + 0] = c0 >= threshold;
    keep[4 * b + 1] = c1 >= threshold;
    keep[4 * b + 2] = c2 >= threshold;
    keep[4 * b + 3] = c3 >= threshold;
  }
  if (n % 4) {
    const auto words = philox4x32(rng.seed(), rng.stream(), static_cast<uint64_t>(blocks));
    for (int64_t i = 4 * blocks; i < n; ++i)
      keep[i] = words[static_cast<size_t>(i % 4)] >= threshold;
  }
}

BRAID_MULTIVERSION void apply_mask(const float* x, const uint8_t* keep, float scale, float* y,
                                   int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * (static_cast<float>(keep[i]) * scale);
}

}  // namespace

Dropout::Dropout(float p) : p_(p), scale_(1.0f), stream_id_(fnv1a("")) {
  BRAID_CHECK(p >= 0.0f && p < 1.0f, "Dropout(p=", p,
              "): p must be in [0, 1) (the probability of zeroing an element)");
  scale_ = 1.0f / (1.0f - p);
}

void Dropout::declare(ParamSet&, const std::string& prefix) { stream_id_ = fnv1a(prefix); }

std::unique_ptr<Cache> Dropout::make_cache() const { return std::make_unique<DropoutCache>(); }

const Tensor& Dropout::forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) {
  auto& c = static_cast<DropoutCache&>(cache);
  BRAID_CHECK(x.dtype() == DType::f32, "Dropout: input must be f32, got ", dtype_name(x.dtype()),
              " of shape ", x.shape().str());
  if (ctx.mode == Mode::eval || p_ == 0.0f) {
    c.identity = true;
    c.out = x;
    return c.out;
  }
  if (c.identity) {
    c.out = Tensor();
    c.dx = Tensor();
    c.identity = false;
  }
  const int64_t n = x.numel();
  const auto bytes = static_cast<size_t>(n);
  if (c.mask.bytes() < bytes) c.mask = Buffer(bytes, MemCategory::activations);
  auto* keep = static_cast<uint8_t*>(c.mask.data());
  // Drop when word < p * 2^32; p < 1 so the threshold fits in 32 bits except for p within
  // 2^-33 of 1, which rounds to the largest word.
  const double t = std::round(static_cast<double>(p_) * 4294967296.0);
  const uint32_t threshold = t >= 4294967295.0 ? 4294967295u : static_cast<uint32_t>(t);
  draw_mask(ctx.rng.fork(stream_id_), threshold, keep, n);
  c.out.ensure(x.shape());
  apply_mask(x.f32(), keep, scale_, c.out.f32(), n);
  return c.out;
}

const Tensor& Dropout::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  auto& c = static_cast<DropoutCache&>(cache);
  BRAID_CHECK(c.out.defined(), "Dropout: backward called before forward on this cache");
  BRAID_CHECK(dy.shape() == c.out.shape(), "Dropout: gradient shape ", dy.shape().str(),
              " differs from output shape ", c.out.shape().str());
  if (!need_dx) return no_grad();
  if (c.identity) {
    c.dx = dy;
    return c.dx;
  }
  c.dx.ensure(dy.shape(), DType::f32, MemCategory::activation_grads);
  apply_mask(dy.f32(), static_cast<const uint8_t*>(c.mask.data()), scale_, c.dx.f32(), dy.numel());
  return c.dx;
}

}  // namespace braid::nn
