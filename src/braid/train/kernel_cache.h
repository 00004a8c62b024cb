// The kernel cache: the GEMM and convolution choices timed on this machine
// (core/gemm_choice.h, nn/conv_choice.h), kept in a file per CPU model that later jobs
// start from (train/job_kernels.h), so a job does not time again what an earlier one
// measured, and jobs that read the same cache choose alike.
//
// Where: kernel_cache_dir(), process-wide; braid's main sets it from BRAID_KERNEL_CACHE
// (unset: $XDG_CACHE_HOME/braid, else $HOME/.cache/braid; "off": none; else that
// directory). Empty means no cache, the default for library code and unit tests. The file
// is <dir>/kernels-<16 hex digits>.json, the digits the XXH64 of the machine key: the CPU
// (model, features), the GEMM libraries' versions and the BLAS thread count, each of which
// changes what is fastest.
//
//   {"magic": "braid-kernel-cache", "version": 1, "machine": "<the machine key>",
//    "xxh64": "<XXH64 of choices.dump(), 16 hex digits>",
//    "choices": {"gemm": [...], "conv": [...]}}        (entries as in train/kernel_record.h)
//
// Entries are only ever added: a cached choice stays until the file is deleted (then the
// next jobs time again). A save reads, merges and replaces the file under an flock on
// <file>.lock, writing through train/atomic_file.h: ranks saving at once lose nothing, and
// a reader sees the old file or the new one, never a torn one. A corrupt file (not JSON, a
// wrong magic, checksum or entry) or another machine's is warned about and ignored: its
// shapes are timed again and the next save replaces it. A file of a newer version is
// ignored and left alone. The cache only saves time, so its I/O errors are warnings, never
// thrown.
//
// Thread-safe.
#pragma once

#include <string>

#include "train/kernel_record.h"

namespace braid::train {

inline constexpr const char* kKernelCacheMagic = "braid-kernel-cache";
inline constexpr int kKernelCacheVersion = 1;

void set_kernel_cache_dir(std::string dir);  // empty: no cache
std::string kernel_cache_dir();
// "CPU ...; OpenBLAS ...; oneDNN ...; threads=N": what a cached choice was timed on.
std::string kernel_cache_machine();
// The cache file for this machine and thread count; empty when there is no cache.
std::string kernel_cache_path();

// The cached choices (origin given, no times); none when there is no cache or it cannot be
// used (warned).
KernelChoices read_kernel_cache();

// Adds this process's measurements (gemm_measurements(), conv_measurements()) that the
// cache lacks to it; returns how many. Nothing is read or written when no measurement is
// new since the last call.
int save_kernel_measurements();

}  // namespace braid::train
