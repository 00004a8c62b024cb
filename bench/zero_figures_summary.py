#!/usr/bin/env python3
"""Summarises bench/zero_figures.sh: throughput of ZeRO stage 1 against DDP at 2 ranks
(medians over rounds), bytes sent a step a rank against DDP's, and peak memory per rank
by category against the per-parameter formulas (Adam: DDP 16 bytes, stage 1 8 + 12/N)."""
import json
import statistics
import sys
from collections import defaultdict

runs = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
MB = 1e6
speed = defaultdict(list)
memory = {}
for r in runs:
    stage = r.get("zero_stage", 0) if r["strategy"] == "ddp" else "single"
    key = (r["model"], r["ranks"], stage)
    unit = "tokens_per_s" if "tokens_per_s" in r else "samples_per_s"
    if r["ranks"] == 2:
        speed[(r["model"], stage)].append((r[unit], r.get("ring_bytes_sent_per_rank", 0)))
    memory[key] = r["peak_memory_bytes"]

print("throughput at 2 ranks (tokens/s, medians) and bytes sent a step a rank")
print(f"{'model':10} {'ddp':>9} {'zero-1':>9} {'ratio':>6} {'ddp MB':>8} {'zero-1 MB':>10} {'bytes ratio':>11}")
for model in sorted({m for m, _ in speed}):
    d = [s for s, _ in speed[(model, 0)]]
    z = [s for s, _ in speed[(model, 1)]]
    db = speed[(model, 0)][0][1]
    zb = speed[(model, 1)][0][1]
    print(f"{model:10} {statistics.median(d):9.0f} {statistics.median(z):9.0f} "
          f"{statistics.median(z) / statistics.median(d):6.3f} {db / MB:8.2f} {zb / MB:10.2f} "
          f"{zb / db:11.3f}   rounds {len(d)}")

print("\npeak memory per rank (MB): parameters + gradients + optimizer, against the formula")
print(f"{'model':10} {'ranks':>5} {'strategy':>8} {'params':>8} {'grads':>8} {'optim':>8} "
      f"{'sum':>8} {'formula':>8} {'activ.':>8}")
for (model, ranks, stage), m in sorted(memory.items(), key=lambda kv: str(kv[0])):
    p = m["parameters"]
    n_params = p / 4  # fp32 parameters, alignment padding included
    formula = 16 * n_params if stage in (0, "single") else (8 + 12 / ranks) * n_params
    total = p + m["gradients"] + m["optimizer"]
    name = {0: "ddp", 1: "zero-1", "single": "single"}[stage]
    print(f"{model:10} {ranks:5} {name:>8} {p / MB:8.1f} {m['gradients'] / MB:8.1f} "
          f"{m['optimizer'] / MB:8.1f} {total / MB:8.1f} {formula / MB:8.1f} "
          f"{m['activations'] / MB:8.1f}")
