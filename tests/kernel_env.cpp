// Linked into every test binary. braid chooses its GEMM library and convolution algorithm
// by timing, per process (core/gemm_choice.h, nn/conv_choice.h), so two braid processes
// may compute different bits. Tests that compare separately run processes bit for bit
// need them to compute alike: every braid process a test starts inherits these forced
// choices, unless the test (or the person running the suite) sets its own.
// In-process code reads no environment, so the unit tests keep the timed choice.
#include <cstdlib>

namespace {

const bool kForcedKernels = [] {
  ::setenv("BRAID_GEMM", "openblas", /*overwrite=*/0);
  ::setenv("BRAID_CONV", "gemm", /*overwrite=*/0);
  return true;
}();

}  // namespace
