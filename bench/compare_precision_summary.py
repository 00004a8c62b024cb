"""Medians of bench/compare_precision.sh's runs: samples/s (tokens/s for gpt-tiny) of braid
and PyTorch at fp32 and bf16, and the ratios issue 18 asks for.
  python3 bench/compare_precision_summary.py runs.jsonl"""
import json
import statistics
import sys

rates = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    impl = r.get("impl", "torch")
    rate = r.get("samples_per_s") or r.get("tokens_per_s")
    rates.setdefault((r["model"], impl, r.get("precision", "fp32")), []).append(rate)
med = {k: statistics.median(v) for k, v in rates.items()}
print(f"{'model':9} {'braid fp32':>11} {'torch fp32':>11} {'braid bf16':>11} {'torch bf16':>11}"
      f" {'fp32 vs torch':>14} {'bf16 vs torch':>14} {'bf16 vs fp32':>13}")
for m in ["mlp", "cnn", "gpt-tiny"]:
    bf, tf, bb, tb = (med.get((m, i, p), float("nan")) for i, p in
                      [("braid", "fp32"), ("torch", "fp32"), ("braid", "bf16"), ("torch", "bf16")])
    print(f"{m:9} {bf:11.0f} {tf:11.0f} {bb:11.0f} {tb:11.0f} {bf / tf:14.2f} {bb / tb:14.2f}"
          f" {bb / bf:13.2f}")
print("runs per cell:", sorted({len(v) for v in rates.values()}))
