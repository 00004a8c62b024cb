"""Side-by-side allreduce: braid, Open MPI 4.1 and PyTorch 1.13's gloo on this host.

Each round runs every implementation's sweep (float32 sum, 4 KiB..256 MiB, x4 steps) one
after the other, so slow phases of a noisy machine hit all of them alike; the table gives
each implementation's median over rounds and braid's ratio to the others.

  /usr/bin/python3 bench/compare_allreduce.py --ranks 2 --rounds 3
  /usr/bin/python3 bench/compare_allreduce.py --ranks 4 --impls braid,openmpi --sizes 1M,16M
  /usr/bin/python3 bench/compare_allreduce.py --impls braid,braid-shared,openmpi

Needs build/release/braid, mpicc/mpirun (openmpi-bin, libopenmpi-dev) and python3-torch.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPI_BENCH = os.path.join(ROOT, "build", "mpi_allreduce_bench")


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def human(n):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def json_lines(cmd, env=None):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    rows = []
    for line in out.splitlines():
        if line.startswith("[rank "):  # braid launch's prefix
            line = line.split("] ", 1)[1]
        if line.startswith("{"):
            rows.append(json.loads(line))
    return rows


def run_braid(a, lo, hi, shared=False):
    cmd = [a.braid, "bench", "allreduce", "-n", str(a.ranks), "--min", str(lo), "--max", str(hi),
           "--factor", "4", "--seconds", str(a.seconds), "--algorithm", a.algorithm, "--json"]
    if a.transport:
        cmd += ["--transport", a.transport]
    if shared:
        cmd += ["--shared"]
    return json_lines(cmd)


def run_braid_shared(a, lo, hi):
    """braid on buffers from comm::allocate_shared, which peers read in place."""
    return run_braid(a, lo, hi, shared=True)


def run_openmpi(a, lo, hi):
    if not os.path.exists(MPI_BENCH):
        subprocess.run(["mpicc", "-O2", "-o", MPI_BENCH,
                        os.path.join(ROOT, "bench", "mpi", "mpi_allreduce_bench.c")], check=True)
    return json_lines(["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                       "-n", str(a.ranks), MPI_BENCH, "--min", str(lo), "--max", str(hi),
                       "--json"])


def run_gloo(a, lo, hi):
    return json_lines([sys.executable, os.path.join(ROOT, "bench", "gloo_allreduce_bench.py"),
                       "--ranks", str(a.ranks), "--min", str(lo), "--max", str(hi)])


RUNNERS = {"braid": run_braid, "braid-shared": run_braid_shared, "openmpi": run_openmpi,
           "gloo": run_gloo}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="4K,1M,16M,64M,256M",
                    help="sizes to report (each a power-of-4 multiple of 4K)")
    ap.add_argument("--impls", default="braid,openmpi,gloo")
    ap.add_argument("--braid", default=os.path.join(ROOT, "build", "release", "braid"))
    ap.add_argument("--algorithm", default="auto", help="braid's --algorithm")
    ap.add_argument("--transport", default="", help="braid's --transport (default auto)")
    ap.add_argument("--seconds", type=float, default=0.3)
    ap.add_argument("--json", action="store_true", help="also print every raw row")
    a = ap.parse_args()
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    impls = a.impls.split(",")
    lo, hi = min(sizes), max(sizes)
    # busbw[impl][bytes] -> one figure per round; time_us likewise.
    busbw = {i: {s: [] for s in sizes} for i in impls}
    time_us = {i: {s: [] for s in sizes} for i in impls}
    for r in range(a.rounds):
        for impl in impls:
            for row in RUNNERS[impl](a, lo, hi):
                if a.json:
                    print(json.dumps(dict(row, round=r)), flush=True)
                if row["bytes"] in busbw[impl]:
                    busbw[impl][row["bytes"]].append(row["busbw_GBps"])
                    time_us[impl][row["bytes"]].append(row["time_us"])
        print(f"# round {r + 1}/{a.rounds} done", file=sys.stderr, flush=True)

    med = lambda xs: statistics.median(xs) if xs else float("nan")
    print(f"# allreduce float32 sum, {a.ranks} ranks, median of {a.rounds} rounds "
          f"(busbw GB/s | time us)")
    head = f"{'size':>6}" + "".join(f" {i + ' busbw':>14} {i + ' us':>12}" for i in impls)
    ours = [i for i in impls if i.startswith("braid")]
    others = [i for i in impls if not i.startswith("braid")]
    head += "".join(f" {b + '/' + o:>20}" for b in ours for o in others)
    print(head)
    for s in sizes:
        line = f"{human(s):>6}"
        for i in impls:
            line += f" {med(busbw[i][s]):14.3f} {med(time_us[i][s]):12.2f}"
        for b in ours:
            for o in others:
                line += f" {med(busbw[b][s]) / med(busbw[o][s]):20.2f}"
        print(line)


if __name__ == "__main__":
    main()
