// What this CPU can run, detected once at first use (CPUID plus the OS's saved-state mask,
// via __builtin_cpu_supports), and the instruction-set levels braid's hand-written kernels
// are compiled for. Thread-safe: the detection is a function-local static.
//
// Kernels take an explicit Isa so tests can pin the scalar reference and compare every
// path bitwise; production callers pass nothing and get best_isa().
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace braid {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512bf16 = false;
  bool avx512fp16 = false;
};

const CpuFeatures& cpu_features();

// One line for logs, e.g. "AMD EPYC (2 threads): avx2 fma f16c; kernels: avx2".
std::string cpu_description();

// Levels, each a superset of the one before:
//   scalar:      portable C++, the reference every other path must match bit for bit.
//   avx2:        AVX2 + FMA + F16C.
//   avx512:      avx2 + AVX-512 F/BW/VL.
//   avx512_bf16: avx512 + AVX512_BF16 (VCVTNEPS2BF16, VDPBF16PS).
enum class Isa : uint8_t { scalar, avx2, avx512, avx512_bf16 };

std::string_view isa_name(Isa isa);
bool isa_supported(Isa isa);
Isa best_isa();
// Throws braid::Error naming the level and this CPU unless isa_supported(isa); `what`
// names the caller for the message.
void require_isa(Isa isa, std::string_view what);

}  // namespace braid
