// BRAID_MULTIVERSION compiles a function for AVX-512, AVX2+FMA and baseline x86-64 and
// picks the best at load time (GCC function multiversioning), so one binary runs
// everywhere at full speed. Write the loops over __restrict pointers with loop-invariant
// scalars so GCC vectorises them without -ffast-math.
#pragma once

// Under ThreadSanitizer the load-time resolvers would run before TSan's runtime has started
// (and crash), so TSan builds use the baseline code only.
#if defined(__SANITIZE_THREAD__)
#define BRAID_MULTIVERSION
#else
#define BRAID_MULTIVERSION \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
