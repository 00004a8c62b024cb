// The peak measurements run and report sane numbers. No timing assertions: the machine
// is shared, so only "finite, positive, best >= median" can be relied on.
#include "core/peak.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"

namespace braid {
namespace {

void expect_sane(const PeakResult& r) {
  EXPECT_TRUE(r.available);
  EXPECT_GE(r.samples, 1);
  EXPECT_TRUE(std::isfinite(r.best_gflops));
  EXPECT_GT(r.median_gflops, 0);
  EXPECT_GE(r.best_gflops, r.median_gflops);
}

TEST(Peak, FmaRunsOnEverySupportedLevel) {
  for (Isa isa : {Isa::avx2, Isa::avx512, Isa::avx512_bf16}) {
    SCOPED_TRACE(isa_name(isa));
    if (!isa_supported(isa)) {
      EXPECT_THROW(measure_fma_peak(isa, 0.001), Error);
      continue;
    }
    const PeakResult r = measure_fma_peak(isa, 0.005);
    expect_sane(r);
    std::printf("[ note ] fp32 fma %s: best %.1f median %.1f GFLOP/s (%lld samples)\n",
                isa_name(isa).data(), r.best_gflops, r.median_gflops,
                static_cast<long long>(r.samples));
  }
  const PeakResult scalar = measure_fma_peak(Isa::scalar, 0.001);
  EXPECT_FALSE(scalar.available);
  EXPECT_EQ(scalar.best_gflops, 0);
}

TEST(Peak, Bf16DotRunsOrSaysUnavailable) {
  const PeakResult r = measure_bf16_dot_peak(0.005);
  if (isa_supported(Isa::avx512_bf16)) {
    expect_sane(r);
  } else {
    EXPECT_FALSE(r.available);
    EXPECT_EQ(r.best_gflops, 0);
    EXPECT_EQ(r.samples, 0);
  }
}

TEST(Peak, SgemmOnASmallShapeWithEitherLibrary) {
  for (const GemmLibrary library : {GemmLibrary::openblas, GemmLibrary::onednn}) {
    const PeakResult r = measure_sgemm(library, true, false, 16, 32, 8, 5);
    expect_sane(r);
    EXPECT_EQ(r.samples, 5);
  }
}

TEST(Peak, BadArgumentsThrow) {
  EXPECT_THROW(measure_fma_peak(best_isa(), 0), Error);
  EXPECT_THROW(measure_bf16_dot_peak(-1), Error);
  EXPECT_THROW(measure_sgemm(GemmLibrary::openblas, false, false, 0, 4, 4, 1), Error);
  EXPECT_THROW(measure_sgemm(GemmLibrary::onednn, false, false, 4, 4, 4, 0), Error);
}

}  // namespace
}  // namespace braid
