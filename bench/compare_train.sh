#!/usr/bin/env bash
# Side-by-side training throughput, braid vs PyTorch (one thread each), alternating runs
# so machine noise hits both alike. Prints one JSON line per run; quote medians.
# Usage: bench/compare_train.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
for r in $(seq "$rounds"); do
  for spec in "mlp 128 40" "cnn 128 30" "gpt-tiny 32 10"; do
    set -- $spec
    build/release/braid bench train --model "$1" --batch "$2" --steps "$3" --warmup 3 --json
    /usr/bin/python3 bench/pytorch_train_bench.py --model "$1" --batch "$2" --steps "$3" --warmup 3 --json
  done
done
