#!/usr/bin/env bash
# The main job: install, build, then train the CNN on Fashion-MNIST data-parallel over two
# local ranks (DDP; 64 samples per rank, the recipe's global batch of 128) and evaluate the
# checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release braid   # just the program; scripts/test.sh builds the tests
build/release/braid launch -n 2 -- build/release/braid train --config configs/cnn.json --batch 64 \
  --epochs 2 --out runs/quickstart --overwrite
build/release/braid eval --checkpoint runs/quickstart/checkpoint
