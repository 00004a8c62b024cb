#include "core/gemm_bf16.h"

#include <oneapi/dnnl/dnnl.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/convert.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/gemm.h"
#include "core/log.h"

namespace braid {
namespace {

void check(dnnl_status_t status, const char* what) {
  BRAID_CHECK(status == dnnl_success, "oneDNN bf16 matmul: ", what, " failed with status ",
              static_cast<int>(status));
}

// The engine and stream of the calling thread (oneDNN objects are cheap to keep).
struct Device {
  dnnl_engine_t engine = nullptr;
  dnnl_stream_t stream = nullptr;
  Device() {
    check(dnnl_engine_create(&engine, dnnl_cpu, 0), "engine");
    check(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags), "stream");
  }
  ~Device() {
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(engine);
  }
};

Device& device() {
  thread_local Device d;
  return d;
}

using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float,
                       float, bool>;

// One shape's primitive and the memory objects it runs on (their data pointers set per call).
struct Matmul {
  dnnl_primitive_t primitive = nullptr;
  dnnl_memory_t a = nullptr, b = nullptr, c = nullptr, bias = nullptr;
  Matmul() = default;
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;
  ~Matmul() {
    if (primitive) dnnl_primitive_destroy(primitive);
    for (dnnl_memory_t m : {a, b, c, bias})
      if (m) dnnl_memory_destroy(m);
  }
};

dnnl_memory_desc_t matrix(int64_t rows, int64_t cols, bool transposed, int64_t ld,
                          dnnl_data_type_t type) {
  // Logical [rows, cols]; stored row-major as given, or as the transpose [cols, rows].
  const dnnl_dims_t dims = {rows, cols};
  const dnnl_dims_t strides = {transposed ? 1 : ld, transposed ? ld : 1};
  dnnl_memory_desc_t md;
  check(dnnl_memory_desc_init_by_strides(&md, 2, dims, type, strides), "memory descriptor");
  return md;
}

// Null when oneDNN has no implementation for this CPU.
std::unique_ptr<Matmul> make_matmul(const Key& key) {
  const auto [ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, has_bias] = key;
  const dnnl_memory_desc_t a = matrix(M, K, ta, lda, dnnl_bf16);
  const dnnl_memory_desc_t b = matrix(K, N, tb, ldb, dnnl_bf16);
  const dnnl_memory_desc_t c = matrix(M, N, false, ldc, dnnl_f32);
  const dnnl_memory_desc_t bias = matrix(1, N, false, N, dnnl_f32);  // broadcast over rows
  dnnl_matmul_desc_t desc;
  check(dnnl_matmul_desc_init(&desc, &a, &b, has_bias ? &bias : nullptr, &c), "descriptor");
  dnnl_primitive_attr_t attr;
  check(dnnl_primitive_attr_create(&attr), "attributes");
  if (alpha != 1.0f) check(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha), "alpha");
  dnnl_post_ops_t post = nullptr;
  if (beta != 0.0f) {
    check(dnnl_post_ops_create(&post), "post-ops");
    check(dnnl_post_ops_append_sum(post, beta), "beta");
    check(dnnl_primitive_attr_set_post_ops(attr, post), "post-ops");
  }
  dnnl_primitive_desc_t pd = nullptr;
  const dnnl_status_t status =
      dnnl_primitive_desc_create(&pd, &desc, attr, device().engine, nullptr);
  if (post) dnnl_post_ops_destroy(post);
  dnnl_primitive_attr_destroy(attr);
  if (status == dnnl_unimplemented) return nullptr;
  check(status, "primitive descriptor");
  auto m = std::make_unique<Matmul>();
  const dnnl_status_t made = dnnl_primitive_create(&m->primitive, pd);
  dnnl_primitive_desc_destroy(pd);
  check(made, "primitive");
  check(dnnl_memory_create(&m->a, &a, device().engine, DNNL_MEMORY_NONE), "memory");
  check(dnnl_memory_create(&m->b, &b, device().engine, DNNL_MEMORY_NONE), "memory");
  check(dnnl_memory_create(&m->c, &c, device().engine, DNNL_MEMORY_NONE), "memory");
  if (has_bias)
    check(dnnl_memory_create(&m->bias, &bias, device().engine, DNNL_MEMORY_NONE), "memory");
  return m;
}

// Whether oneDNN multiplies bf16 on this CPU: asked once, on a small product.
bool onednn_has_bf16() {
  static const bool has = [] {
    const bool ok =
        make_matmul(Key{false, false, 16, 16, 16, 16, 16, 16, 1.0f, 0.0f, false}) != nullptr;
    if (!ok)
      log_warn("bf16: oneDNN has no bf16 matmul for this CPU (", cpu_description(),
               "); bf16 products widen to fp32 and run at fp32's speed");
    else if (!cpu_features().avx512bf16)
      log_info(
          "bf16: this CPU lacks AVX512_BF16; oneDNN emulates bf16 products (slower than "
          "on a CPU with it)");
    return ok;
  }();
  return has;
}

std::atomic<int> g_forced{-1};  // -1: not forced, else a Bf16GemmPath

void widen_and_multiply(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                        const BFloat16* A, const BFloat16* B, float beta, float* C, int64_t lda,
                        int64_t ldb, int64_t ldc, const float* bias) {
  thread_local std::vector<float> wa, wb;
  const int64_t a_rows = ta ? K : M, b_rows = tb ? N : K;
  wa.resize(static_cast<size_t>(a_rows * lda));
  wb.resize(static_cast<size_t>(b_rows * ldb));
  bf16_to_f32(A, wa.data(), a_rows * lda);
  bf16_to_f32(B, wb.data(), b_rows * ldb);
  if (bias != nullptr) {  // C = beta C + bias, then the product accumulates onto it
    for (int64_t r = 0; r < M; ++r)
      for (int64_t j = 0; j < N; ++j) C[r * ldc + j] = beta * C[r * ldc + j] + bias[j];
    beta = 1.0f;
  }
  sgemm(ta, tb, M, N, K, alpha, wa.data(), wb.data(), beta, C, lda, ldb, ldc);
}

}  // namespace

const char* bf16_gemm_path_name(Bf16GemmPath path) {
  return path == Bf16GemmPath::onednn ? "onednn" : "widen";
}

Bf16GemmPath bf16_gemm_path() {
  const int forced = g_forced.load(std::memory_order_relaxed);
  if (forced >= 0) return static_cast<Bf16GemmPath>(forced);
  return onednn_has_bf16() ? Bf16GemmPath::onednn : Bf16GemmPath::widen;
}

void set_bf16_gemm_path(Bf16GemmPath path) {
  BRAID_CHECK(path != Bf16GemmPath::onednn || onednn_has_bf16(),
              "bf16 GEMM: oneDNN has no bf16 matmul on this CPU (", cpu_description(), ")");
  g_forced.store(static_cast<int>(path), std::memory_order_relaxed);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const BFloat16* A, const BFloat16* B, float beta, float* C, int64_t lda, int64_t ldb,
               int64_t ldc, const float* bias) {
  if (M == 0 || N == 0) return;
  BRAID_CHECK(bias == nullptr || alpha == 1.0f, "gemm_bf16: a bias is added with alpha 1 only");
  if (lda == 0) lda = trans_a ? M : K;
  if (ldb == 0) ldb = trans_b ? K : N;
  if (ldc == 0) ldc = N;
  if (bf16_gemm_path() == Bf16GemmPath::widen) {
    widen_and_multiply(trans_a, trans_b, M, N, K, alpha, A, B, beta, C, lda, ldb, ldc, bias);
    return;
  }
  // Primitives per thread: a cached primitive's memory objects take this call's pointers.
  thread_local std::map<Key, std::unique_ptr<Matmul>> cache;
  const Key key{trans_a, trans_b, M, N, K, lda, ldb, ldc, alpha, beta, bias != nullptr};
  auto it = cache.find(key);
  if (it == cache.end()) {
    auto made = make_matmul(key);
    BRAID_CHECK(made != nullptr, "oneDNN bf16 matmul ", M, "x", N, "x", K,
                " is not implemented on this CPU");
    it = cache.emplace(key, std::move(made)).first;
  }
  Matmul& m = *it->second;
  apply_onednn_threads();
  check(dnnl_memory_set_data_handle(m.a, const_cast<BFloat16*>(A)), "set A");
  check(dnnl_memory_set_data_handle(m.b, const_cast<BFloat16*>(B)), "set B");
  check(dnnl_memory_set_data_handle(m.c, C), "set C");
  if (bias != nullptr)
    check(dnnl_memory_set_data_handle(m.bias, const_cast<float*>(bias)), "set bias");
  const dnnl_exec_arg_t args[] = {
      {DNNL_ARG_SRC, m.a}, {DNNL_ARG_WEIGHTS, m.b}, {DNNL_ARG_DST, m.c}, {DNNL_ARG_BIAS, m.bias}};
  check(dnnl_primitive_execute(m.primitive, device().stream, bias != nullptr ? 4 : 3, args),
        "execute");
  check(dnnl_stream_wait(device().stream), "wait");
}

}  // namespace braid
