#!/usr/bin/env bash
# The main job: install, build, then train on Fashion-MNIST and evaluate the checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release braid   # just the program; scripts/test.sh builds the tests
build/release/braid train --config configs/cnn.json --epochs 2 --out runs/quickstart --overwrite
build/release/braid eval --checkpoint runs/quickstart/checkpoint
