// CPU feature detection. GCC's __builtin_cpu_supports checks CPUID and that the OS saves
// the AVX / AVX-512 register state (XCR0), so a feature reported here is usable.
#include "core/cpu.h"

#include <fstream>
#include <thread>
#include <utility>

#include "core/error.h"

namespace braid {
namespace {

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.f16c = __builtin_cpu_supports("f16c");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
  f.avx512fp16 = __builtin_cpu_supports("avx512fp16");
#endif
  return f;
}

std::string model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

std::string cpu_description() {
  const CpuFeatures& f = cpu_features();
  std::string out =
      model_name() + " (" + std::to_string(std::thread::hardware_concurrency()) + " threads):";
  const std::pair<bool, const char*> names[] = {{f.avx2, "avx2"},
                                                {f.fma, "fma"},
                                                {f.f16c, "f16c"},
                                                {f.avx512f, "avx512f"},
                                                {f.avx512bw, "avx512bw"},
                                                {f.avx512vl, "avx512vl"},
                                                {f.avx512bf16, "avx512_bf16"},
                                                {f.avx512fp16, "avx512_fp16"}};
  for (const auto& [present, name] : names)
    if (present) out += std::string(" ") + name;
  out += "; kernels: ";
  out += isa_name(best_isa());
  return out;
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar:
      return "scalar";
    case Isa::avx2:
      return "avx2";
    case Isa::avx512:
      return "avx512";
    case Isa::avx512_bf16:
      return "avx512_bf16";
  }
  return "?";
}

bool isa_supported(Isa isa) {
  const CpuFeatures& f = cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  const bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512vl;
  switch (isa) {
    case Isa::scalar:
      return true;
    case Isa::avx2:
      return avx2;
    case Isa::avx512:
      return avx512;
    case Isa::avx512_bf16:
      return avx512 && f.avx512bf16;
  }
  return false;
}

Isa best_isa() {
  static const Isa best = [] {
    for (Isa isa : {Isa::avx512_bf16, Isa::avx512, Isa::avx2})
      if (isa_supported(isa)) return isa;
    return Isa::scalar;
  }();
  return best;
}

void require_isa(Isa isa, std::string_view what) {
  BRAID_CHECK(isa_supported(isa), what, ": instruction set '", isa_name(isa),
              "' is not supported by this CPU (", cpu_description(),
              "); pass best_isa() or a lower level");
}

}  // namespace braid
