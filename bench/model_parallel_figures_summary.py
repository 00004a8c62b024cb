#!/usr/bin/env python3
"""Summarises bench/model_parallel_figures.sh's JSON lines: medians over the rounds.

  python3 bench/model_parallel_figures_summary.py model_parallel.jsonl
"""
import json
import statistics
import sys
from collections import defaultdict

runs = [json.loads(line) for line in open(sys.argv[1]) if line.strip().startswith("{")]
single = [r["tokens_per_s"] for r in runs if r["strategy"] == "single"]
by = defaultdict(list)
for r in runs:
    if r["strategy"] == "pipeline":
        by[(r["schedule"], r["micro_batches"])].append(r)

med = statistics.median
print(f"1 rank: {med(single):.0f} tokens/s (rounds: {', '.join(f'{x:.0f}' for x in single)})")
pipe = by.get(("1f1b", 8), [])
if pipe and single:
    rates = [r["tokens_per_s"] for r in pipe]
    print(f"2-stage pipeline 1f1b M=8: {med(rates):.0f} tokens/s = {med(rates) / med(single):.2f}x "
          f"(goal 1.6x); cut: {pipe[0].get('cut', '')}")
tensor = [r for r in runs if r["strategy"] == "tensor"]
if tensor and single:
    rates = [r["tokens_per_s"] for r in tensor]
    print(f"2-rank tensor parallel: {med(rates):.0f} tokens/s = {med(rates) / med(single):.2f}x "
          f"(goal 1.7x); communication exposed {med([r['comm_exposed_ms'] for r in tensor]):.1f} "
          f"ms a step")


def weights_mib(r):
    m = r["peak_memory_bytes"]
    return (m["parameters"] + m["gradients"] + m["optimizer"]) / 2**20


def activations_mib(r):
    return r["peak_memory_bytes"]["activations"] / 2**20


print()
print("Memory of rank 0 (MiB): parameters + gradients + optimizer, activations")
for label, rs in [("1 rank", [r for r in runs if r["strategy"] == "single"]),
                  ("tensor 2", tensor), ("pipeline 1f1b M=8, stage 0", pipe)]:
    if rs:
        print(f"  {label}: {weights_mib(rs[0]):.1f}, {activations_mib(rs[0]):.1f}")
print()
def theory_as_cut(r):
    """The theory with the stages as cut: the slowest stage's compute sets the pace, so a
    faster stage also idles for the difference."""
    P, M, v = len(r["stages"]), r["micro_batches"], r.get("chunks", 1)
    compute = [st["compute_ms"] for st in r["stages"]]
    span = max(compute) * (M + (P - 1) / v) / M
    return statistics.mean([(span - c) / span for c in compute])


print("| schedule | M | bubble measured (stage 0 / stage 1) | theory | measured / theory "
      "| theory for the stages as cut (ratio) | activations MiB (stage 0 / 1) | tokens/s |")
print("|---|---|---|---|---|---|---|---|")
for (schedule, m), rs in sorted(by.items()):
    b = med([r["bubble_mean"] for r in rs])
    b0 = med([r["stages"][0]["bubble"] for r in rs])
    b1 = med([r["stages"][1]["bubble"] for r in rs])
    theory = rs[0]["bubble_theory"]
    a0 = med([r["stages"][0]["peak_memory_bytes"]["activations"] for r in rs]) / 2**20
    a1 = med([r["stages"][1]["peak_memory_bytes"]["activations"] for r in rs]) / 2**20
    rate = med([r["tokens_per_s"] for r in rs])
    cut = med([theory_as_cut(r) for r in rs])
    print(f"| {schedule} | {m} | {b:.3f} ({b0:.3f} / {b1:.3f}) | {theory:.3f} | {b / theory:.2f} "
          f"| {cut:.3f} ({b / cut:.2f}) | {a0:.1f} / {a1:.1f} | {rate:.0f} |")
