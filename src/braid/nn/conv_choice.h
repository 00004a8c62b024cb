// Which of Conv2d's algorithms (conv2d.h) computes each convolution geometry, chosen as
// GEMM libraries are (core/gemm_choice.h): the direct kernels win for few input channels,
// and single-threaded they can win on wider layers too, but they do not scale with BLAS
// threads, so no fixed threshold is best on every machine and thread count. Conv2d's
// automatic algorithm looks the geometry up; the first time, the process's OnMiss
// (core/choice_table.h) decides: measure times forward plus weight gradient both ways on
// the layer's own input, at the forward's precision (the input gradient goes through the
// same GEMM and col2im either way); rule takes conv_rule() (direct below 32 taps, k*k*C:
// a 1-channel first layer), the same in every process; rule_and_measure computes by the
// rule and keeps the timing for the kernel cache.
//
// The policy forces one algorithm (BRAID_CONV=gemm|direct); the table is recorded and
// replayed with the GEMM choices (train/kernel_record.h), and a job's ranks start from
// rank 0's (train/job_kernels.h).
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
  ChoiceOrigin origin = ChoiceOrigin::given;
  ConvKey key() const { return conv_key(geometry, precision); }
};

// The fixed rule: direct for fewer than kRuleDirectMaxTaps taps (k*k*C), else gemm.
inline constexpr int64_t kRuleDirectMaxTaps = 32;
bool conv_rule_direct(const ConvGeometry& g);

std::optional<ConvChoice> find_conv_choice(const ConvGeometry& g, Precision precision);
std::vector<ConvChoice> conv_choices();       // in use
std::vector<ConvChoice> conv_measurements();  // timed in this process
void set_conv_choices(std::span<const ConvChoice> choices);
void add_conv_choices(std::span<const ConvChoice> choices);  // keys without a choice only
void clear_conv_choices();

ChoiceTable<ConvKey, ConvChoice>& conv_choice_table();
// The table's choice of `g`, else one decided by on_miss() from `measure()` (a timed
// ConvChoice) and the rule, recorded (once per geometry).
template <typename Measure>
ConvChoice find_or_choose_conv_choice(const ConvGeometry& g, Precision precision, Measure measure) {
  return conv_choice_table().find_or_choose(conv_key(g, precision), measure, [&] {
    ConvChoice c;
    c.geometry = g;
    c.precision = precision;
    c.direct = conv_rule_direct(g);
    return c;
  });
}

}  // namespace braid::nn
