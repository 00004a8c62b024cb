// Which of Conv2d's algorithms (conv2d.h) computes each convolution geometry, measured on
// the CPU the run is on, as GEMM libraries are (core/gemm_choice.h): the direct kernels
// win for few input channels, and single-threaded they can win on wider layers too, but
// they do not scale with BLAS threads, so no fixed threshold is right on every machine and
// thread count. Conv2d's automatic algorithm looks the geometry up and, the first time,
// times forward plus weight gradient both ways on the layer's own input, at the forward's
// precision (the input gradient goes through the same GEMM and col2im either way).
//
// The policy forces one algorithm (BRAID_CONV=gemm|direct); the table is recorded and
// replayed with the GEMM choices (train/kernel_record.h).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/choice_table.h"
#include "nn/conv2d_kernels.h"
#include "nn/module.h"

namespace braid::nn {

enum class ConvPolicy { automatic, gemm, direct };

// "auto", "gemm", "direct"; anything else is an error naming them.
ConvPolicy parse_conv_policy(std::string_view text);
const char* conv_policy_name(ConvPolicy policy);
void set_conv_policy(ConvPolicy policy);
ConvPolicy conv_policy();

// B, H, W, C, O, k, stride, pad, and the precision (0 fp32, 1 bf16): under bf16 the gemm
// path runs twice as fast, so the choice is the precision's own.
using ConvKey = std::array<int64_t, 9>;
ConvKey conv_key(const ConvGeometry& g, Precision precision);
ConvGeometry conv_geometry(const ConvKey& key);  // output sizes derived
std::string describe(const ConvGeometry& g);     // "128x28x28x1 -> 32, k3 s1 p1"

struct ConvChoice {
  ConvGeometry geometry;
  Precision precision = Precision::fp32;
  bool direct = false;
  // Forward plus weight gradient, best of a few rounds, in seconds; 0 when recorded.
  double gemm_s = 0, direct_s = 0;
  ConvKey key() const { return conv_key(geometry, precision); }
};

std::optional<ConvChoice> find_conv_choice(const ConvGeometry& g, Precision precision);
std::vector<ConvChoice> conv_choices();
void set_conv_choices(std::span<const ConvChoice> choices);
void clear_conv_choices();

ChoiceTable<ConvKey, ConvChoice>& conv_choice_table();
// The recorded choice of `g`, else `measure()`'s, recorded (once per geometry).
template <typename Measure>
ConvChoice find_or_measure_conv_choice(const ConvGeometry& g, Precision precision,
                                       Measure measure) {
  return conv_choice_table().find_or_measure(conv_key(g, precision), measure);
}

}  // namespace braid::nn
