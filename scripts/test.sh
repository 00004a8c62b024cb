#!/usr/bin/env bash
# The whole test suite: a Release build and an ASan+UBSan build each run every test; a TSan
# build runs the communication and launch tests (the code with threads and processes); an
# MPI build (Debian's Open MPI) runs the MPI backend's tests under mpirun.
set -euo pipefail
cd "$(dirname "$0")/.."
# With the system tests' packages (Slurm for the srun test; ~20 s to install).
scripts/setup.sh --test-packages
jobs=$(nproc)
for flavour in release asan; do
  echo "== $flavour build"
  scripts/build.sh "$flavour"
  echo "== $flavour tests"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir "build/$flavour" --output-on-failure -j"$jobs" --timeout 600
done
echo "== tsan build (comm, launch, parallel)"
scripts/build.sh tsan
echo "== tsan tests (comm, launch, parallel)"
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp" \
  ctest --test-dir build/tsan --output-on-failure -j"$jobs" --timeout 600 -L "comm|launch|parallel"
echo "== mpi build (the MPI backend)"
scripts/build.sh mpi
echo "== mpi tests (under mpirun)"
# One at a time: each test already runs up to 4 ranks on the 2 cores.
ctest --test-dir build/mpi --output-on-failure -j1 --timeout 600 -L mpi
