#!/usr/bin/env bash
# The accuracy runs quoted in the issue notes: each built-in model trained with its config
# in configs/, then evaluated on the test split. Usage: scripts/reference-runs.sh [OUTDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs}
braid=build/release/braid
for model in mlp cnn cnn-bn; do
  start=$(date +%s)
  $braid train --config configs/$model.json --out "$out/$model" | tail -n 3
  echo "$model: $(( $(date +%s) - start )) s"
  $braid eval --checkpoint "$out/$model/checkpoint"
done
