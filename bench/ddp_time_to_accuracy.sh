#!/usr/bin/env bash
# Time to 0.90 test accuracy for the cnn on 2 ranks, braid against PyTorch DDP (gloo), each
# with its own recipe over the same 10-epoch budget and batch 128 per rank, one after the
# other on this machine. braid's clock: metrics.jsonl's run_seconds at each epoch's
# evaluation (from the first step, evaluation included; data loading and set-up before it
# left out, as bench/pytorch_ddp_accuracy.py does).
#   bench/ddp_time_to_accuracy.sh [EPOCHS] [TARGET]     (defaults 10, 0.90)
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-10}
target=${2:-0.90}
out=$(mktemp -d)
build/release/braid launch -n 2 -- build/release/braid train --model cnn --batch 128 \
  --epochs "$epochs" --out "$out/braid" --overwrite > "$out/braid.log" 2>&1
python3 - "$out/braid/metrics.jsonl" "$target" <<'PY'
import json, sys
evals = [json.loads(l) for l in open(sys.argv[1]) if '"eval"' in l]
evals = [e for e in evals if e.get("when") == "epoch"]
hit = next((e for e in evals if e["accuracy"] >= float(sys.argv[2])), None)
print(json.dumps({"impl": "braid", "epochs": len(evals),
                  "accuracy": [round(e["accuracy"], 4) for e in evals],
                  "seconds": [round(e["run_seconds"], 1) for e in evals],
                  "best": max(e["accuracy"] for e in evals),
                  "target": float(sys.argv[2]),
                  "epoch_reached": evals.index(hit) + 1 if hit else None,
                  "seconds_to_target": round(hit["run_seconds"], 1) if hit else None}))
PY
/usr/bin/python3 bench/pytorch_ddp_accuracy.py --ranks 2 --epochs "$epochs" --target "$target" \
  2>/dev/null | tail -1
rm -rf "$out"
