#!/usr/bin/env bash
# Issue 17's accuracy figures: Fashion-MNIST cnn, 5 epochs, 1 server + 2 workers at 2 x 128,
# test accuracy of ps sync, async and ssp (s = 2) beside one process at batch 256 and 2-rank
# local SGD (H = 8). Prints one line per run: its name, best and final test accuracy; the
# async run's staleness histogram from its server's ps-server-0.json.
# FedAvg runs the same 5 epochs' worth of client training (K = 100 clients, C = 0.1, E = 1,
# local batch 32, SGD 0.05 with momentum 0.9: 50 rounds), IID and Dirichlet(0.1) splits; the
# runs ending in _b10 use McMahan et al.'s local batch of 10 instead.
#   bench/ps_accuracy.sh [OUT_DIR] [RUNS...]
#   (runs: one sync async ssp local_sgd fedavg_iid fedavg_dirichlet fedavgm_dirichlet
#    fedavg_iid_b10 fedavg_dirichlet_b10;
#    default all)
set -euo pipefail
cd "$(dirname "$0")/.."
braid=${BRAID:-build/release/braid}
out=${1:-/tmp/braid-ps-accuracy}
shift || true
runs=("$@")
((${#runs[@]})) || runs=(one sync async ssp local_sgd fedavg_iid fedavg_dirichlet fedavgm_dirichlet)
fedavg=(--strategy fedavg --fedavg.clients 100 --fedavg.fraction 0.1 --fedavg.local-epochs 1
  --optimizer sgd --lr 0.05 --momentum 0.9 --schedule constant --eval-every 10)
mkdir -p "$out"
common=(--model cnn --epochs 5 --threads 1 --log-every 100 --overwrite)
for run in "${runs[@]}"; do
  dir=$out/$run
  case "$run" in
    one) "$braid" train "${common[@]}" --batch 256 --out "$dir" >"$out/$run.log" 2>&1 ;;
    sync | async | ssp)
      "$braid" launch --servers 1 --workers 2 -- "$braid" train "${common[@]}" --batch 128 \
        --strategy ps --ps.mode "$run" --ps.staleness-bound 2 --out "$dir" >"$out/$run.log" 2>&1 ;;
    local_sgd)
      "$braid" launch -n 2 -- "$braid" train "${common[@]}" --batch 128 --strategy local_sgd \
        --local-sgd.period 8 --out "$dir" >"$out/$run.log" 2>&1 ;;
    fedavg_iid | fedavg_dirichlet | fedavgm_dirichlet | fedavg_iid_b10 | fedavg_dirichlet_b10)
      split=(--fedavg.split iid)
      [[ $run == *dirichlet* ]] && split=(--fedavg.split dirichlet --fedavg.alpha 0.1)
      [[ $run == *_b10 ]] && split+=(--batch 10)
      server=()
      [[ $run == fedavgm_* ]] && server=(--fedavg.server-optimizer avgm --fedavg.server-momentum 0.5)
      [[ $run == *_b10 ]] || split+=(--batch 32)
      "$braid" launch --servers 1 --workers 2 -- "$braid" train "${common[@]}" "${fedavg[@]}" \
        "${split[@]}" "${server[@]}" --out "$dir" >"$out/$run.log" 2>&1 ;;
    *) echo "unknown run '$run'" >&2; exit 2 ;;
  esac
  python3 - "$dir" "$run" <<'PY'
import json, sys, os
d, name = sys.argv[1], sys.argv[2]
evals = [json.loads(l) for l in open(d + "/metrics.jsonl") if '"eval"' in l]
acc = [e["accuracy"] for e in evals]
secs = evals[-1].get("run_seconds", 0)
line = f"{name:10s} best {max(acc):.4f} final {acc[-1]:.4f}  ({len(acc)} evals, {secs:.0f} s)"
p = d + "/ps-server-0.json"
if os.path.exists(p):
    s = json.load(open(p))
    h = s["staleness_histogram"]
    last = max([i for i, v in enumerate(h) if v] or [0])
    line += f"  updates {s['updates']} dropped {s['dropped']} staleness {h[:last + 1]}"
print(line, flush=True)
PY
done
