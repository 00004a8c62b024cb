"""Medians of bench/ddp_figures.sh's JSON lines: braid against PyTorch DDP per model, the
2-rank over 1-rank scaling, and deterministic mode against the default.

  python3 bench/ddp_figures_summary.py /tmp/ddp_figures.jsonl
"""
import json
import statistics
import sys
from collections import defaultdict


def main(path):
    rows = defaultdict(list)  # (impl, model, ranks, deterministic) -> samples/s
    for line in open(path):
        r = json.loads(line)
        ranks = r["ranks"]
        impl = r["impl"]
        det = bool(r.get("deterministic", False))
        rate = r.get("samples_per_s") or r["tokens_per_s"] / 128
        rows[(impl, r["model"], ranks, det)].append(rate)
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"{'model':10} {'braid 2r':>10} {'torch 2r':>10} {'ratio':>6}   "
          f"{'braid 1r':>9} {'scaling':>7}   {'torch 1r':>9} {'scaling':>7}   "
          f"{'det 2r':>8} {'det/def':>7}   (samples/s, medians of {len(rows[next(iter(rows))])})")
    for model in ("mlp", "cnn", "gpt-tiny"):
        b2 = med.get(("braid", model, 2, False))
        t2 = med.get(("pytorch-ddp", model, 2, False))
        b1 = med.get(("braid", model, 1, False))
        t1 = med.get(("pytorch-ddp", model, 1, False))
        d2 = med.get(("braid", model, 2, True))
        f = lambda x: f"{x:10.0f}" if x else f"{'-':>10}"
        g = lambda a, b: f"{a / b:7.2f}" if a and b else f"{'-':>7}"
        print(f"{model:10} {f(b2)} {f(t2)} {g(b2, t2)}  {f(b1)[1:]} {g(b2, b1)}  "
              f"{f(t1)[1:]} {g(t2, t1)}  {f(d2)[2:]} {g(d2, b2)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/ddp_figures.jsonl")
