// BRAID_MULTIVERSION compiles a function for AVX-512, AVX2+FMA and baseline x86-64 and
// picks the best at load time (GCC function multiversioning), so one binary runs
// everywhere at full speed. Write the loops over __restrict pointers with loop-invariant
// scalars so GCC vectorises them without -ffast-math.
#pragma once

#define BRAID_MULTIVERSION \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
