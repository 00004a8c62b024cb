#!/usr/bin/env bash
# Configures and builds one flavour of braid into build/<flavour>:
#   build.sh [release|asan|tsan|mpi] [TARGET...]
# With no targets, release and asan build everything, tsan the comm, launch and parallel tests (and
# the braid binary they drive), mpi the MPI backend's tests (-DBRAID_MPI=ON, Open MPI).
set -euo pipefail
cd "$(dirname "$0")/.."
flavour=${1:-release}
shift || true
case "$flavour" in
  release) extra=(-DCMAKE_BUILD_TYPE=Release) ;;
  asan) extra=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DBRAID_SANITIZE=address,undefined") ;;
  tsan) extra=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DBRAID_SANITIZE=thread) ;;
  mpi) extra=(-DCMAKE_BUILD_TYPE=Release -DBRAID_MPI=ON) ;;
  *) echo "build.sh: unknown flavour '$flavour' (release, asan, tsan, mpi)" >&2; exit 2 ;;
esac
targets=("$@")
if ((${#targets[@]} == 0)); then
  case "$flavour" in
    tsan) targets=(braid comm_launch_tests) ;;  # TSan covers the code with threads and processes
    mpi) targets=(braid mpi_tests) ;;
    *) targets=(all) ;;
  esac
fi
# Paths relative to the checkout in ccache's keys, so a fresh clone (CI) hits the cache.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
# The sanitizer flavours build with -g, and ccache then keys on the working directory too
# unless told not to: a clone elsewhere (CI) would rebuild them from nothing.
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
# Four flavours' objects outgrow ccache's default 5 GB, and evictions again mean rebuilds.
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-24G}
# Warnings are errors everywhere (BRAID_WERROR=OFF to relax): the same flags here as in CI,
# so CI's clean clone finds in ccache what was already built here.
werror=${BRAID_WERROR:-ON}
cmake -S . -B "build/$flavour" -G Ninja -DBRAID_WERROR=$werror "${extra[@]}" >/dev/null
cmake --build "build/$flavour" -j"$(nproc)" --target "${targets[@]}"
