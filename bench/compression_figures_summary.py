"""Summary of bench/compression_figures.sh's JSON lines: per link rate, tables of
2-rank samples/s (median over rounds) for braid per codec and PyTorch DDP (gloo) per hook,
each braid codec against braid's uncompressed DDP (codec none, fp32), braid against PyTorch
with the same codec (fp16 / fp16_compress_hook, powersgd / powerSGD_hook), the compression
ratios, the issue's goals, and every failed run.

  python3 bench/compression_figures_summary.py /tmp/compression_figures.jsonl
"""
import json
import statistics
import sys
from collections import defaultdict

CODEC_ORDER = ["none", "bf16", "fp16", "int8", "sign", "topk", "powersgd", "onebit_adam"]
HOOK_ORDER = ["none", "fp16", "powersgd"]
SAME_CODEC = [("fp16", "fp16"), ("powersgd", "powersgd")]  # braid codec, PyTorch hook
GOAL_VS_PYTORCH = 1.5
GOAL_BEST_VS_NONE = 3.0  # at 100mbit on gpt-small


def ordered(seen, order):
    return [x for x in order if x in seen] + sorted(x for x in seen if x not in order)


def fmt(x, digits=None):
    if x is None:
        return "-"
    if digits is None:
        digits = 0 if x >= 100 else (1 if x >= 10 else 2)
    return f"{x:.{digits}f}"


def table(header, rows):
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]

    def line(r):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |"

    out = [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    return "\n".join(out + [line(r) for r in rows])


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: compression_figures_summary.py RESULTS.jsonl")
    machine, runs, bad_lines = None, [], 0
    for n, text in enumerate(open(sys.argv[1]), 1):
        text = text.strip()
        if not text.startswith("{"):
            continue
        try:
            row = json.loads(text)
        except ValueError:
            bad_lines += 1
            print(f"line {n}: not JSON: {text[:80]}", file=sys.stderr)
            continue
        if row.get("type") == "machine":
            machine = row
        elif "impl" in row and "rate" in row:
            runs.append(row)

    if machine:
        print(f"CPU: {machine['cpu']} ({machine['cores']} cores); torch {machine['torch']}; "
              f"braid {machine['braid_commit']}; {machine['date']}")
        print(f"{machine['rounds']} rounds, {machine['threads_per_rank']} thread(s) per rank; "
              f"powersgd rank {machine['powersgd_rank']} from step {machine['start_iter']} "
              f"(braid and PyTorch), topk ratio {machine['topk_ratio']}; PyTorch powerSGD_hook "
              f"with one DDP bucket (bucket_cap_mb above the gradients: gloo aborts with more)")
    else:
        print("CPU: (no machine line in the results)")

    # (rate, model, impl, variant) -> list of ok rows; errors listed at the end
    ok, errors = defaultdict(list), []
    for r in runs:
        variant = r.get("codec") if r["impl"] == "braid" else r.get("hook")
        key = (r["rate"], r["model"], r["impl"], variant)
        if r.get("status") == "ok" and r.get("samples_per_s") is not None:
            ok[key].append(r)
        else:
            errors.append(r)

    def med(key, field="samples_per_s"):
        vals = [x[field] for x in ok.get(key, []) if x.get(field) is not None]
        return statistics.median(vals) if vals else None

    def cell(key):  # a median, or "err" when every run of it failed
        v = med(key)
        if v is not None:
            return v, fmt(v)
        failed = any((e["rate"], e["model"], e["impl"],
                      e.get("codec") if e["impl"] == "braid" else e.get("hook")) == key
                     for e in errors)
        return None, "err" if failed else "-"

    rates = list(dict.fromkeys(r["rate"] for r in runs))
    models = list(dict.fromkeys(r["model"] for r in runs))
    codecs = ordered({r["codec"] for r in runs if r["impl"] == "braid"}, CODEC_ORDER)
    hooks = ordered({r["hook"] for r in runs if r["impl"] != "braid"}, HOOK_ORDER)
    goals = []
    for rate in rates:
        rmodels = [m for m in models if any(r["rate"] == rate and r["model"] == m for r in runs)]
        print(f"\n== {rate} per host (tc tbf egress), 2 ranks, samples/s, median of rounds "
              f"(GPTs: sequences of 128 tokens)")
        # braid per codec, with the ratio to braid none
        rows = []
        for m in rmodels:
            base = med((rate, m, "braid", "none"))
            row = [m]
            for c in codecs:
                v, s = cell((rate, m, "braid", c))
                if v is not None and base and c != "none":
                    s += f" ({v / base:.2f}x)"
                row.append(s)
            rows.append(row)
        print("\nbraid per codec (x = ratio to braid's uncompressed fp32 DDP, codec none)")
        print(table(["model"] + codecs, rows))
        # PyTorch per hook, and braid against PyTorch with the same codec
        rows = []
        for m in rmodels:
            row = [m] + [cell((rate, m, "pytorch", h))[1] for h in hooks]
            for bc, ph in SAME_CODEC:
                b, p = med((rate, m, "braid", bc)), med((rate, m, "pytorch", ph))
                ratio = b / p if b and p else None
                row.append(f"{ratio:.2f}x" if ratio else "-")
                if ratio is not None:
                    goals.append((f"{rate} {m}: braid {bc} / PyTorch {ph} hook = {ratio:.2f}x "
                                  f"(goal >= {GOAL_VS_PYTORCH}x)", ratio >= GOAL_VS_PYTORCH))
            b, p = med((rate, m, "braid", "none")), med((rate, m, "pytorch", "none"))
            row.append(f"{b / p:.2f}x" if b and p else "-")
            rows.append(row)
        print("\nPyTorch 1.13 DDP over gloo per hook, and braid / PyTorch")
        print(table(["model"] + [f"pytorch {h}" for h in hooks] +
                    [f"braid {bc} / pt {ph}" for bc, ph in SAME_CODEC] +
                    ["braid none / pt none"], rows))
        # compression ratios and bytes on the wire
        rows = []
        for m in rmodels:
            row = [m]
            for c in codecs:
                cr = med((rate, m, "braid", c), "compression_ratio")
                wb = med((rate, m, "braid", c), "wire_bytes_per_step")
                row.append(fmt(cr, 1) + (f" ({wb / 1e6:.2f} MB)" if wb else ""))
            for h in hooks:
                row.append(fmt(med((rate, m, "pytorch", h), "compression_ratio"), 1))
            rows.append(row)
        print("\ncompression ratio (braid: its JSON's compression_ratio and wire_bytes_per_step; "
              "PyTorch: fp16 2, powerSGD elements before/after)")
        print(table(["model"] + [f"braid {c}" for c in codecs] + [f"pt {h}" for h in hooks],
                    rows))
        if "gpt-small" in rmodels and rate == "100mbit":
            base = med((rate, "gpt-small", "braid", "none"))
            best = [(med((rate, "gpt-small", "braid", c)), c) for c in codecs if c != "none"]
            best = [b for b in best if b[0] is not None]
            if base and best:
                v, c = max(best)
                goals.append((f"100mbit gpt-small: braid's best codec ({c}) / braid none = "
                              f"{v / base:.2f}x (goal >= {GOAL_BEST_VS_NONE}x)",
                              v / base >= GOAL_BEST_VS_NONE))
    if goals:
        print("\ngoals")
        for text, met in goals:
            print(f"  {'met ' if met else 'MISS'} {text}")
    if errors:
        print(f"\n{len(errors)} failed run(s)")
        for e in errors:
            variant = e.get("codec") if e["impl"] == "braid" else e.get("hook")
            why = e.get("error", "status " + str(e.get("status")))
            last = (e.get("rank0_stderr") or []) + (e.get("rank1_stderr") or [])
            said = [x for x in last if "error" in x.lower()] or last  # the telling line
            detail = f": {said[-1][:160]}" if said else ""
            print(f"  {e['rate']} {e['model']} round {e.get('round')} {e['impl']} {variant}: "
                  f"{why}{detail}")
    n_ok = sum(len(v) for v in ok.values())
    print(f"\n{n_ok} measurements, {len(errors)} failed, {bad_lines} unparsable line(s)")


if __name__ == "__main__":
    main()
