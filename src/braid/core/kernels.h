// Vectorised elementwise and reduction kernels on fp32 arrays. Each is compiled for
// AVX-512, AVX2+FMA and baseline x86-64 and the best one is picked at load time
// (GCC function multiversioning), so one binary runs everywhere at full speed.
// Arrays may alias only where noted (out == a is fine for the binary ops).
#pragma once

#include <cstdint>

namespace braid {

void add(const float* a, const float* b, float* out, int64_t n);  // out = a + b
void add_inplace(const float* x, float* y, int64_t n);            // y += x
void axpy(float alpha, const float* x, float* y, int64_t n);      // y += alpha x
void scale(float alpha, float* x, int64_t n);                     // x *= alpha
void fill(float value, float* x, int64_t n);
float sum(const float* x, int64_t n);
double sum_squares(const float* x, int64_t n);  // in double
float max_value(const float* x, int64_t n);     // n > 0
// Adds bias[j] to every row of x[rows, cols].
void add_bias_rows(float* x, const float* bias, int64_t rows, int64_t cols);
// db[j] += sum over rows of dy[rows, cols][.., j].
void sum_rows_into(const float* dy, float* db, int64_t rows, int64_t cols);

}  // namespace braid
