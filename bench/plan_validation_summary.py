#!/usr/bin/env python3
"""Summarises bench/plan_validation.sh's JSON lines: per link and configuration, the median
measured and predicted step over the rounds and the error; the median and worst absolute
error (issue 33: at most 10 % and 25 %); and per link and rank count, whether the
configuration the plan ranks first among those measured is within 5 % of the fastest
measured one.

  python3 bench/plan_validation_summary.py plan_validation.jsonl
"""
import json
import statistics
import sys
from collections import defaultdict

runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
by = defaultdict(list)
for r in runs:
    by[(r["link"], r["ranks"], r["config"])].append(r)
med = statistics.median
rows = []
for (link, ranks, config), rs in by.items():
    m = med(r["measured_ms"] for r in rs)
    p = med(r["predicted_ms"] for r in rs)
    rows.append((link, ranks, config, m, p, (p - m) / m, len(rs)))
if runs:
    print(f"model {runs[0]['model']}, CPU {runs[0]['cpu']}")
print(f"{'link':8} {'ranks':>5} {'configuration':22} {'measured ms':>12} {'predicted ms':>13} "
      f"{'error':>8} rounds")
for link, ranks, config, m, p, e, n in rows:
    print(f"{link:8} {ranks:>5} {config:22} {m:12.1f} {p:13.1f} {100 * e:+7.1f}% {n}")
errors = [abs(r[5]) for r in rows]
if errors:
    print(f"absolute error: median {100 * med(errors):.1f} % (goal <= 10 %), "
          f"worst {100 * max(errors):.1f} % (goal <= 25 %) over {len(errors)} configurations")
groups = defaultdict(list)
for row in rows:
    groups[(row[0], row[1])].append(row)
print("choice: per link and rank count, the plan's first among the measured configurations")
for (link, ranks), rs in groups.items():
    if len(rs) < 2:
        continue
    # Throughput: the same samples per step within a group except DDP's (batch x ranks);
    # compare by samples/s, the planner's own ranking.
    def samples(row):
        return 1.0 if row[2] in ("pipeline gpipe", "pipeline 1f1b", "pipeline interleaved", "tensor", "single") else ranks
    chosen = max(rs, key=lambda r: samples(r) / r[4])
    fastest = max(rs, key=lambda r: samples(r) / r[3])
    ratio = (samples(chosen) / chosen[3]) / (samples(fastest) / fastest[3])
    print(f"  {link:8} {ranks} ranks: plan picks {chosen[2]!r}, fastest measured {fastest[2]!r}: "
          f"{100 * ratio:.1f} % of the fastest (goal >= 95 %)")
