#include "nn/conv_choice.h"

#include <atomic>

#include "core/error.h"

namespace braid::nn {
namespace {

std::atomic<ConvPolicy> g_policy{ConvPolicy::automatic};

}  // namespace

ConvPolicy parse_conv_policy(std::string_view text) {
  if (text == "auto") return ConvPolicy::automatic;
  if (text == "gemm") return ConvPolicy::gemm;
  if (text == "direct") return ConvPolicy::direct;
  BRAID_THROW(Error, "convolution algorithm '", text,
              "' is not one braid knows: use auto (time both on each layer and keep the "
              "faster), gemm or direct");
}

const char* conv_policy_name(ConvPolicy policy) {
  switch (policy) {
    case ConvPolicy::gemm:
      return "gemm";
    case ConvPolicy::direct:
      return "direct";
    case ConvPolicy::automatic:
      break;
  }
  return "auto";
}

void set_conv_policy(ConvPolicy policy) { g_policy.store(policy, std::memory_order_relaxed); }
ConvPolicy conv_policy() { return g_policy.load(std::memory_order_relaxed); }

ConvKey conv_key(const ConvGeometry& g, Precision precision) {
  return {g.B, g.H, g.W, g.C, g.O, g.k, g.stride, g.pad, precision == Precision::bf16 ? 1 : 0};
}

ConvGeometry conv_geometry(const ConvKey& key) {
  ConvGeometry g;
  g.B = key[0], g.H = key[1], g.W = key[2], g.C = key[3];
  g.O = key[4], g.k = key[5], g.stride = key[6], g.pad = key[7];
  g.OH = (g.H + 2 * g.pad - g.k) / g.stride + 1;
  g.OW = (g.W + 2 * g.pad - g.k) / g.stride + 1;
  return g;
}

std::string describe(const ConvGeometry& g) {
  return detail::concat(g.B, "x", g.H, "x", g.W, "x", g.C, " -> ", g.O, ", k", g.k, " s", g.stride,
                        " p", g.pad);
}

ChoiceTable<ConvKey, ConvChoice>& conv_choice_table() {
  static ChoiceTable<ConvKey, ConvChoice> table;
  return table;
}

std::optional<ConvChoice> find_conv_choice(const ConvGeometry& g, Precision precision) {
  return conv_choice_table().find(conv_key(g, precision));
}
bool conv_rule_direct(const ConvGeometry& g) { return g.taps() < kRuleDirectMaxTaps; }

std::vector<ConvChoice> conv_choices() { return conv_choice_table().all(); }
std::vector<ConvChoice> conv_measurements() { return conv_choice_table().measured(); }
void set_conv_choices(std::span<const ConvChoice> choices) { conv_choice_table().set(choices); }
void add_conv_choices(std::span<const ConvChoice> choices) { conv_choice_table().add(choices); }
void clear_conv_choices() { conv_choice_table().clear(); }

}  // namespace braid::nn
