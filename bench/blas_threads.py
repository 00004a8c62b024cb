"""Sizes the BLAS thread pool before torch is imported.

Debian's torch runs its GEMMs in OpenBLAS, and torch.set_num_threads() does not resize
OpenBLAS's pool: a "--threads 1" run would still multiply matrices on every core (seen:
two busy threads, 1.8x the one-thread samples/s). OpenBLAS reads its size from the
environment when it loads, so the scripts call limit_blas_threads() before `import torch`.
"""
import os
import sys


def threads_from_argv(default=1):
    args = sys.argv[1:]
    for i, arg in enumerate(args):
        if arg == "--threads" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--threads="):
            return arg.split("=", 1)[1]
    return str(default)


def limit_blas_threads(default=1):
    threads = threads_from_argv(default)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ[var] = threads
