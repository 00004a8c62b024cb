// Linked into every test binary: the kernels' environment of a test process.
//
// braid chooses its GEMM library and convolution algorithm by timing when a process runs
// alone (core/gemm_choice.h, nn/conv_choice.h), so two separately run braid processes may
// compute different bits. Tests that compare such processes bit for bit need them to
// compute alike: every braid process a test starts inherits these forced choices, unless
// the test (or the person running the suite) sets its own. In-process code reads no
// environment, so the unit tests keep the timed choice. No braid process a test starts
// reads or writes the user's kernel cache (train/kernel_cache.h) unless the test names one.
//
// BLAS runs on one thread in the test process itself, as braid's own processes do by
// default (`threads: 1`); otherwise OpenBLAS would start a thread pool that no braid run
// has, whose synchronisation ThreadSanitizer cannot see (the library is not instrumented).
#include <cstdlib>

#include "core/gemm.h"

namespace {

const bool kKernelEnvironment = [] {
  ::setenv("BRAID_GEMM", "openblas", /*overwrite=*/0);
  ::setenv("BRAID_CONV", "gemm", /*overwrite=*/0);
  ::setenv("BRAID_KERNEL_CACHE", "off", /*overwrite=*/0);
  braid::set_blas_threads(1);
  return true;
}();

}  // namespace
