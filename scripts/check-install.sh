#!/usr/bin/env bash
# braid as a library, checked end to end (the ctest "install"):
#   check-install.sh BUILD_DIR [STEPS]
# installs BUILD_DIR into a temporary prefix, builds examples/ against it the two ways a user
# would (CMake's find_package(braid) and pkg-config), then runs every example under the
# installed `braid launch -n 2` for STEPS steps (default 200) and checks that it exits 0 and
# prints a test accuracy above 0.6. Warnings in the examples are errors.
set -euo pipefail
build=$(cd "${1:?usage: check-install.sh BUILD_DIR [STEPS]}" && pwd)
steps=${2:-200}
source_dir=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/braid-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

echo "== cmake --install into $prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/braid lib/libbraid_core.a lib/cmake/braid/braidConfig.cmake \
  lib/cmake/braid/braidConfigVersion.cmake lib/pkgconfig/braid.pc include/braid/nn/module.h \
  include/braid/parallel/ddp.h include/braid/train/checkpoint.h include/braid/launch/job.h; do
  [[ -e $prefix/$f ]] || { echo "check-install: $prefix/$f was not installed" >&2; exit 1; }
done

echo "== examples/ with find_package(braid)"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$source_dir/examples" -B "$work/examples" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_FLAGS=-Werror >/dev/null
cmake --build "$work/examples" -j"$(nproc)"

echo "== custom_loss with pkg-config"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# shellcheck disable=SC2046  # pkg-config's words are flags, one each
c++ -O2 -Wall -Wextra -Werror "$source_dir/examples/custom_loss.cpp" -o "$work/custom_loss_pc" \
  $(pkg-config --cflags --libs braid)

# Runs one example under the installed launcher; its last "test accuracy X" must be > 0.6.
run() {
  local name=$1
  shift
  echo "== braid launch -n 2 -- $name"
  local out rc=0
  out=$(cd "$work" && "$prefix/bin/braid" launch -n 2 -- "$@" --steps "$steps" 2>&1) || rc=$?
  echo "$out" | tail -4
  if ((rc != 0)); then
    echo "check-install: $name exited $rc" >&2
    echo "$out" >&2
    return 1
  fi
  local accuracy
  accuracy=$(echo "$out" | grep -o 'test accuracy [0-9.]*' | tail -1 | awk '{print $3}')
  if [[ -z $accuracy ]] || ! awk -v a="$accuracy" 'BEGIN { exit !(a > 0.6) }'; then
    echo "check-install: $name's test accuracy is '${accuracy}', not above 0.6" >&2
    return 1
  fi
}
run custom_layer "$work/examples/custom_layer"
run custom_loss "$work/examples/custom_loss"
run custom_loop "$work/examples/custom_loop" --checkpoint "$work/checkpoint"
run "custom_loss (pkg-config)" "$work/custom_loss_pc"
[[ -f $work/checkpoint/state.json ]] || { echo "check-install: no checkpoint saved" >&2; exit 1; }
echo "check-install: ok"
