#!/usr/bin/env bash
# Issue 33's scaling tables: `braid plan scaling` for gpt-small and a GPT of 1.1 B
# parameters (d_model 2048, 20 blocks, 16 heads, context 1024, a vocabulary of 51200 as
# Megatron-LM pads GPT-2's, so tensor parallelism can cut it), from 1 to 4,096 ranks on 512 hosts of 8 cores (one rank a core, 8 GiB each) with
# 100 Gbit/s links (5 us) between hosts and this machine's shared memory inside one (measured
# here). Profiles are measured here, one thread, and kept in DIR for reruns.
#   bench/plan_scaling.sh [DIR]      (writes DIR/{cluster.json,*.prof.json,*.txt,*.svg})
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-plan-scaling}
mkdir -p "$dir"
braid=build/release/braid
lscpu | grep -E "Model name" | sed 's/  */ /g' >&2
"$braid" plan measure-cluster --out "$dir/here.json" --ranks-per-host 2 >/dev/null
/usr/bin/python3 - "$dir/here.json" "$dir/cluster.json" <<'PY'
import json, sys
here = json.load(open(sys.argv[1]))
cluster = {"hosts": 512, "ranks_per_host": 8, "cores_per_host": 8, "memory_per_host_gib": 64,
           "links": {"intra": here["links"]["intra"],
                     "inter": {"latency_us": 5, "gbit_s": 100}}}
json.dump(cluster, open(sys.argv[2], "w"), indent=1)
PY
gpt1b="gpt:d_model=2048,layers=20,heads=16,context=1024,vocab=51200"
[ -f "$dir/gpt-small.txt" ] || "$braid" plan scaling --model gpt-small --cluster "$dir/cluster.json" --batch-per-rank 8 \
  --profile "$dir/gpt-small.prof.json" --svg "$dir/gpt-small.svg" | tee "$dir/gpt-small.txt"
"$braid" plan scaling --model "$gpt1b" --seq-len 1024 --cluster "$dir/cluster.json" \
  --batch-per-rank 1 --profile "$dir/gpt-1b.prof.json" --profile-micro-batches 1,2 \
  --profile-repeats 1 --svg "$dir/gpt-1b.svg" | tee "$dir/gpt-1b.txt"
