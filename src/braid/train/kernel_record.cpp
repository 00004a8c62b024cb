#include "train/kernel_record.h"

#include <filesystem>
#include <fstream>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"
#include "core/gemm_choice.h"
#include "nn/conv_choice.h"
#include "train/checkpoint.h"

namespace braid::train {

using nlohmann::json;

json kernel_choices_json(const KernelChoices& choices) {
  json gemm = json::array(), conv = json::array();
  for (const GemmChoice& c : choices.gemm)
    gemm.push_back({{"m", c.shape.M},
                    {"n", c.shape.N},
                    {"k", c.shape.K},
                    {"trans_a", c.shape.trans_a},
                    {"trans_b", c.shape.trans_b},
                    {"library", gemm_library_name(c.method.library)},
                    {"transposed", c.method.transposed},
                    {"openblas_us", c.seconds[0] * 1e6},
                    {"onednn_us", c.seconds[1] * 1e6},
                    {"openblas_transposed_us", c.seconds[2] * 1e6},
                    {"onednn_transposed_us", c.seconds[3] * 1e6},
                    {"origin", choice_origin_name(c.origin)}});
  for (const nn::ConvChoice& c : choices.conv) {
    const nn::ConvKey key = c.key();
    conv.push_back({{"geometry", std::vector<int64_t>(key.begin(), key.begin() + 8)},
                    {"precision", c.precision == nn::Precision::bf16 ? "bf16" : "fp32"},
                    {"algorithm", c.direct ? "direct" : "gemm"},
                    {"gemm_us", c.gemm_s * 1e6},
                    {"direct_us", c.direct_s * 1e6},
                    {"origin", choice_origin_name(c.origin)}});
  }
  return {{"gemm", std::move(gemm)}, {"conv", std::move(conv)}};
}

json kernel_record() {
  json record = {{"cpu", cpu_description()},
                 {"gemm_policy", gemm_policy_name(gemm_policy())},
                 {"conv_policy", nn::conv_policy_name(nn::conv_policy())}};
  record.update(kernel_choices_json({gemm_choices(), nn::conv_choices()}));
  return record;
}

namespace {

std::vector<GemmChoice> parse_gemm(const json& entries, const std::string& source) {
  std::vector<GemmChoice> out;
  for (size_t i = 0; i < entries.size(); ++i) {
    const json& e = entries[i];
    const std::string where = source + ": gemm[" + std::to_string(i) + "]";
    auto size = [&](const char* key) {
      BRAID_CHECK(e.is_object() && e.contains(key) && e[key].is_number_integer() &&
                      e[key].get<int64_t>() > 0,
                  where, ": '", key, "' must be a positive integer");
      return e[key].get<int64_t>();
    };
    auto flag = [&](const char* key) {
      BRAID_CHECK(e.contains(key) && e[key].is_boolean(), where, ": '", key,
                  "' must be true or false");
      return e[key].get<bool>();
    };
    GemmChoice c;
    c.shape = {flag("trans_a"), flag("trans_b"), size("m"), size("n"), size("k")};
    const std::string library = e.value("library", std::string());
    BRAID_CHECK(library == "openblas" || library == "onednn", where, ": 'library' is '", library,
                "'; it must be openblas or onednn");
    c.method.library = library == "onednn" ? GemmLibrary::onednn : GemmLibrary::openblas;
    // Absent from records written before transposed products were a candidate.
    c.method.transposed = e.contains("transposed") && flag("transposed");
    out.push_back(c);
  }
  return out;
}

std::vector<nn::ConvChoice> parse_conv(const json& entries, const std::string& source) {
  std::vector<nn::ConvChoice> out;
  for (size_t i = 0; i < entries.size(); ++i) {
    const json& e = entries[i];
    const std::string where = source + ": conv[" + std::to_string(i) + "]";
    constexpr size_t kSizes = 8;  // the key without its precision
    BRAID_CHECK(e.is_object() && e.contains("geometry") && e["geometry"].is_array() &&
                    e["geometry"].size() == kSizes,
                where, ": 'geometry' must be [B, H, W, C, O, k, stride, pad]");
    nn::ConvKey key{};
    for (size_t j = 0; j < kSizes; ++j) {
      const json& v = e["geometry"][j];
      BRAID_CHECK(v.is_number_integer() && v.get<int64_t>() >= (j == 7 ? 0 : 1), where,
                  ": 'geometry' must hold positive integers (padding may be 0)");
      key[j] = v.get<int64_t>();
    }
    const std::string algorithm = e.value("algorithm", std::string());
    BRAID_CHECK(algorithm == "gemm" || algorithm == "direct", where, ": 'algorithm' is '",
                algorithm, "'; it must be gemm or direct");
    const std::string precision = e.value("precision", std::string("fp32"));
    BRAID_CHECK(precision == "fp32" || precision == "bf16", where, ": 'precision' is '", precision,
                "'; it must be fp32 or bf16");
    nn::ConvChoice c;
    c.geometry = nn::conv_geometry(key);
    c.precision = precision == "bf16" ? nn::Precision::bf16 : nn::Precision::fp32;
    c.direct = algorithm == "direct";
    out.push_back(c);
  }
  return out;
}

}  // namespace

KernelChoices parse_kernel_choices(const json& record, const std::string& source) {
  BRAID_CHECK(record.is_object(), source, ": a kernel record is a JSON object");
  const json none = json::array();
  const json& gemm = record.contains("gemm") ? record["gemm"] : none;
  const json& conv = record.contains("conv") ? record["conv"] : none;
  BRAID_CHECK(gemm.is_array() && conv.is_array(), source,
              ": 'gemm' and 'conv' must be arrays of choices");
  return {parse_gemm(gemm, source), parse_conv(conv, source)};
}

void apply_kernel_record(const json& record, const std::string& source) {
  // Both parsed before either is applied: a bad entry changes nothing.
  const KernelChoices choices = parse_kernel_choices(record, source);
  set_gemm_choices(choices.gemm);
  nn::set_conv_choices(choices.conv);
}

void apply_kernel_record_at(const std::string& path) {
  if (std::filesystem::is_directory(path)) {
    const std::string dir = find_checkpoint_dir(path);
    const json state = read_train_state(dir);
    BRAID_CHECK(state.contains("kernels"), "kernel_choices: checkpoint '", dir,
                "' records no kernel choices (written before braid recorded them); run once "
                "and replay that run's checkpoint");
    apply_kernel_record(state["kernels"], "checkpoint '" + dir + "/state.json' kernels");
    return;
  }
  std::ifstream in(path);
  if (!in) BRAID_THROW(IoError, "kernel_choices: cannot read '", path, "'");
  json record;
  try {
    record = json::parse(in);
  } catch (const json::exception& e) {
    BRAID_THROW(Error, "kernel_choices: '", path, "' is not JSON: ", e.what());
  }
  // A checkpoint's state.json holds the record inside its train_state.
  if (record.contains("train_state") && record["train_state"].contains("kernels")) {
    apply_kernel_record(record["train_state"]["kernels"], "'" + path + "' train_state.kernels");
    return;
  }
  apply_kernel_record(record, "'" + path + "'");
}

namespace {

// "3 timed on this CPU, 1 by the fixed rule, the rest recorded or cached"
template <typename Choice>
std::string origins(const std::vector<Choice>& choices) {
  int timed = 0, rule = 0;
  for (const Choice& c : choices) {
    timed += c.origin == ChoiceOrigin::timed ? 1 : 0;
    rule += c.origin == ChoiceOrigin::rule ? 1 : 0;
  }
  return detail::concat(timed, " timed on this CPU, ", rule,
                        " by the fixed rule, the rest recorded or cached");
}

}  // namespace

std::string describe_kernel_choices() {
  std::string gemm, conv;
  const std::vector<GemmChoice> gemms = gemm_choices();
  if (gemm_policy() != GemmPolicy::automatic) {
    gemm = std::string("GEMMs on ") + gemm_policy_name(gemm_policy()) + " (BRAID_GEMM)";
  } else if (!gemms.empty()) {
    int onednn = 0, openblas = 0, transposed = 0;
    for (const GemmChoice& c : gemms) {
      (c.method.library == GemmLibrary::onednn ? onednn : openblas) += 1;
      transposed += c.method.transposed ? 1 : 0;
    }
    gemm = detail::concat("GEMM: ", gemms.size(), " shapes (", origins(gemms), "): oneDNN for ",
                          onednn, ", OpenBLAS for ", openblas, " (", transposed, " as C^T)");
  }
  const std::vector<nn::ConvChoice> convs = nn::conv_choices();
  if (nn::conv_policy() != nn::ConvPolicy::automatic) {
    conv = std::string("convolutions ") + nn::conv_policy_name(nn::conv_policy()) + " (BRAID_CONV)";
  } else if (!convs.empty()) {
    int direct = 0;
    for (const nn::ConvChoice& c : convs) direct += c.direct ? 1 : 0;
    conv = detail::concat("convolution: direct for ", direct, " of ", convs.size(), " geometries (",
                          origins(convs), ")");
  }
  if (gemm.empty() || conv.empty()) return gemm + conv;
  return gemm + "; " + conv;
}

}  // namespace braid::train
