#!/usr/bin/env python3
"""Summarises bench/zero_figures.sh: throughput of ZeRO stages 1 and 2 against DDP at
2 ranks (medians over rounds), bytes sent a step a rank against DDP's, and peak memory per
rank by category against the per-parameter formulas with Adam and fp32 parameters:
DDP 16 bytes; stage 1 4 + 4 + 12/N (parameters, the flat gradient, the reduced chunks and
the moments of 1/N); stage 2 4 + 12/N plus the window of bucket slots; stage 3 16/N plus
the windows of gathered parameters and gradient slots."""
import json
import statistics
import sys
from collections import defaultdict

runs = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
MB = 1e6
NAMES = {0: "ddp", 1: "zero-1", 2: "zero-2", 3: "zero-3", "single": "single"}
speed = defaultdict(list)
sent = {}
memory = {}
for r in runs:
    stage = r.get("zero_stage", 0) if r["strategy"] == "ddp" else "single"
    unit = "tokens_per_s" if "tokens_per_s" in r else "samples_per_s"
    if r["ranks"] == 2:
        speed[(r["model"], stage)].append(r[unit])
        sent[(r["model"], stage)] = r.get("ring_bytes_sent_per_rank", 0)
    memory[(r["model"], r["ranks"], stage)] = r["peak_memory_bytes"]

print("throughput at 2 ranks (tokens/s, medians) and MB sent a step a rank")
for model in sorted({m for m, _ in speed}):
    ddp = statistics.median(speed[(model, 0)])
    cells = []
    for stage in (0, 1, 2, 3):
        if (model, stage) not in speed:
            continue
        v = statistics.median(speed[(model, stage)])
        cells.append(f"{NAMES[stage]} {v:.0f} ({v / ddp:.3f}x, {sent[(model, stage)] / MB:.2f} MB, "
                     f"{sent[(model, stage)] / sent[(model, 0)]:.3f}x)")
    print(f"  {model:10} " + "; ".join(cells) + f"   rounds {len(speed[(model, 0)])}")

print("\npeak memory per rank (MB): parameters, gradients, optimizer, against the formula")
print(f"{'model':10} {'ranks':>5} {'strategy':>8} {'params':>8} {'grads':>8} {'optim':>8} "
      f"{'sum':>8} {'formula':>8} {'activ.':>8}")
for (model, ranks, stage), m in sorted(memory.items(), key=lambda kv: str(kv[0])):
    p = m["parameters"]
    # fp32 parameters, alignment padding included (stage 3 holds 1/N: take DDP's count)
    n_params = memory.get((model, 1, "single"), m)["parameters"] / 4
    if stage in (0, "single"):
        formula = f"{16 * n_params / MB:8.1f}"
    elif stage == 1:
        formula = f"{(8 + 12 / ranks) * n_params / MB:8.1f}"
    elif stage == 2:
        formula = f"{(4 + 12 / ranks) * n_params / MB:6.1f}+w"
    else:
        formula = f"{16 / ranks * n_params / MB:6.1f}+w"
    total = p + m["gradients"] + m["optimizer"]
    print(f"{model:10} {ranks:5} {NAMES[stage]:>8} {p / MB:8.1f} {m['gradients'] / MB:8.1f} "
          f"{m['optimizer'] / MB:8.1f} {total / MB:8.1f} {formula:>8} "
          f"{m['activations'] / MB:8.1f}")
