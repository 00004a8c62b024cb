// How much memory this machine can still give, for refusing a size before allocating it.
#pragma once

namespace braid::train {

// MemAvailable from /proc/meminfo in bytes (the kernel's estimate of what can be allocated
// without swapping), or 0 where it cannot be read.
double mem_available_bytes();

}  // namespace braid::train
