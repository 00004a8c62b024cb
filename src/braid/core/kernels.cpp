#include "core/kernels.h"

#include <cmath>
#include <limits>

#include "core/multiversion.h"

namespace braid {

BRAID_MULTIVERSION void add(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

BRAID_MULTIVERSION void add_inplace(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

BRAID_MULTIVERSION void axpy(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

BRAID_MULTIVERSION void scale(float alpha, float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

BRAID_MULTIVERSION void fill(float value, float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = value;
}

// Sixteen partial sums in a fixed order: vectorisable without -ffast-math and the result
// does not depend on which instruction set ran.
BRAID_MULTIVERSION float sum(const float* x, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) acc[k] += x[i + k];
  float s = 0;
  for (int k = 0; k < 16; ++k) s += acc[k];
  for (; i < n; ++i) s += x[i];
  return s;
}

BRAID_MULTIVERSION double sum_squares(const float* x, int64_t n) {
  double acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += static_cast<double>(x[i + k]) * x[i + k];
  double s = 0;
  for (int k = 0; k < 8; ++k) s += acc[k];
  for (; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

BRAID_MULTIVERSION float max_value(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

BRAID_MULTIVERSION void add_bias_rows(float* x, const float* bias, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * cols;
    for (int64_t j = 0; j < cols; ++j) row[j] += bias[j];
  }
}

BRAID_MULTIVERSION void sum_rows_into(const float* dy, float* db, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = dy + r * cols;
    for (int64_t j = 0; j < cols; ++j) db[j] += row[j];
  }
}

}  // namespace braid
