#!/usr/bin/env bash
# Configures and builds one flavour of braid: build.sh [release|asan|tsan] -> build/<flavour>.
set -euo pipefail
cd "$(dirname "$0")/.."
flavour=${1:-release}
case "$flavour" in
  release) extra=(-DCMAKE_BUILD_TYPE=Release) ;;
  asan) extra=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DBRAID_SANITIZE=address,undefined") ;;
  tsan) extra=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DBRAID_SANITIZE=thread) ;;
  *) echo "build.sh: unknown flavour '$flavour' (release, asan, tsan)" >&2; exit 2 ;;
esac
werror=OFF
[ "${CI:-}" = "true" ] && werror=ON
cmake -S . -B "build/$flavour" -G Ninja -DBRAID_WERROR=$werror "${extra[@]}" >/dev/null
if [ "$flavour" = tsan ]; then
  # TSan covers the layers with threads and processes: build their tests (and the braid
  # binary they drive) only.
  cmake --build "build/$flavour" -j"$(nproc)" --target braid comm_launch_tests
else
  cmake --build "build/$flavour" -j"$(nproc)"
fi
