#!/usr/bin/env bash
# Installs everything braid's build, tests and main job need from Debian's packages.
# Idempotent: skips apt entirely when every package is already installed.
#
#   scripts/setup.sh                   what a newcomer needs (the quickstart runs this)
#   scripts/setup.sh --test-packages   also what only system tests use: slurm-wlm, for the
#                                      srun test (scripts/slurm-local.sh); python3-sklearn, whose
#                                      CSV datasets the csv reader tests read; scripts/test.sh
set -euo pipefail
packages=(
  build-essential cmake ninja-build ccache pkg-config libopenmpi-dev openmpi-bin
  libopenblas-dev libdnnl-dev nlohmann-json3-dev libcli11-dev libxxhash-dev libssl-dev zlib1g-dev
  libpng-dev libjpeg62-turbo-dev
  libsqlite3-dev libcpp-httplib-dev libjs-dygraphs libcairo2-dev libfontconfig-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist fortunes iproute2
)
case "${1:-}" in
  "") ;;
  --test-packages) packages+=(slurm-wlm chromium python3-sklearn) ;;
  *) echo "setup: unknown option '$1' (accepted: --test-packages)" >&2; exit 2 ;;
esac
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
