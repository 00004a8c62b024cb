#!/usr/bin/python3
"""Recovery from kill -9 in an elastic job: braid's in-process recovery against torchrun's
restart of every worker from the last checkpoint, same model, ranks and machine.

For each kill: wait until the job runs with every rank again (and trains), wait a random
0.3-1.3 s, kill -9 a random rank, and time the kill to the next step any rank completes
after the job recovered. Prints one JSON line per implementation: median, p95, every
recovery, and the steps lost per failure (the last step completed before the kill minus the
step the job went on from).

  bench/elastic_recovery.py --impl braid --kills 50 --ranks 4 [--model cnn]
  bench/elastic_recovery.py --impl torch --kills 10 --ranks 4
  bench/elastic_recovery.py --impl braid --kills 20 --train-args '--zero-stage 3'

braid: `braid launch -n R --min-ranks 1 --max-restarts K -- braid train --log-every 1`; steps
and rounds are read from metrics.jsonl, whose records carry wall-clock `time`.
torch: `torchrun --nnodes 1:1 --nproc_per_node R --max_restarts K pytorch_elastic_worker.py`,
a DDP (gloo) worker that checkpoints every step and logs each step with its time.
"""
import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BRAID = os.path.join(ROOT, "build", "release", "braid")


def records(path):
    try:
        with open(path) as f:
            lines = f.readlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a line being written
    return out


def children(pid):
    """The pids of `pid`'s children whose command line holds `needle` (ranks)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except FileNotFoundError:
        return []


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except FileNotFoundError:
        return ""


def wait_for(predicate, limit=120.0, every=0.002):
    end = time.time() + limit
    while time.time() < end:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise SystemExit("elastic_recovery: timed out waiting")


def percentile(xs, q):
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def run_braid(args, out):
    metrics = os.path.join(out, "run", "metrics.jsonl")
    cmd = [BRAID, "launch", "-n", str(args.ranks), "--min-ranks", "1",
           "--max-restarts", str(args.kills + 5), "--", BRAID, "train", "--model", args.model,
           "--batch", str(args.batch), "--epochs", "1000", "--log-every", "1",
           "--eval-every", "1000000", "--checkpoint-every", "1000000",
           "--elastic.commit-every", str(args.commit_every), "--out", os.path.join(out, "run")]
    cmd += args.train_args.split()
    log = open(os.path.join(out, "braid.log"), "w")
    job = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    recoveries, lost, setups = [], [], []
    try:
        wait_for(lambda: any(r.get("event") == "train" for r in records(metrics)))
        for _ in range(args.kills):
            # Every rank back in (the newest round has them all) and a step since.
            def whole():
                rs = records(metrics)
                rounds = [r for r in rs if r.get("event") == "membership"]
                if rounds and rounds[-1]["world"] != args.ranks:
                    return False
                since = rounds[-1]["time"] if rounds else 0
                return any(r.get("event") == "train" and r["time"] > since for r in rs)
            wait_for(whole)
            time.sleep(random.uniform(0.3, 1.3))
            ranks = [p for p in children(job.pid) if " train " in cmdline(p)]
            victim = random.choice(ranks)
            before = [r for r in records(metrics) if r.get("event") == "train"]
            os.kill(victim, signal.SIGKILL)
            killed = time.time()
            last_step = before[-1]["step"]

            def recovered():
                rs = records(metrics)
                rounds = [r for r in rs if r.get("event") == "membership" and r["time"] > killed]
                if not rounds:
                    return None
                after = [r for r in rs if r.get("event") == "train" and r["time"] > rounds[0]["time"]]
                return (rounds[0], after[0]) if after else None
            round_, step = wait_for(recovered)
            recoveries.append(step["time"] - killed)
            lost.append(last_step - round_["step"])
            setups.append(round_["ready_seconds"])
    finally:
        job.send_signal(signal.SIGTERM)
        try:
            job.wait(timeout=60)
        except subprocess.TimeoutExpired:
            job.kill()
    return recoveries, lost, setups


def run_torch(args, out):
    steps_log = os.path.join(out, "steps.jsonl")
    cmd = ["torchrun", "--nnodes", "1:1", "--nproc_per_node", str(args.ranks),
           "--max_restarts", str(args.kills + 5), "--rdzv_backend", "c10d",
           # Debian's torch 1.13 under Python 3.11 cannot parse the defaults 0 of these (its
           # Std flag lookup skips the zero member): name a value it can.
           "--redirects", "1", "--tee", "1",
           "--rdzv_endpoint", "127.0.0.1:0", os.path.join(HERE, "pytorch_elastic_worker.py"),
           "--model", args.model, "--batch", str(args.batch), "--checkpoint", os.path.join(out, "ck.pt"),
           "--log", steps_log]
    log = open(os.path.join(out, "torch.log"), "w")
    job = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    recoveries, lost = [], []
    try:
        wait_for(lambda: records(steps_log), limit=300)
        for _ in range(args.kills):
            def workers():
                found = []
                for agent in children(job.pid):
                    found += [p for p in children(agent) if "pytorch_elastic_worker" in cmdline(p)]
                found += [p for p in children(job.pid) if "pytorch_elastic_worker" in cmdline(p)]
                return found if len(found) >= args.ranks else None
            # Every worker up and a step done since the last restart.
            wait_for(lambda: workers() and records(steps_log)[-1].get("restart") is not None, limit=300)
            time.sleep(random.uniform(0.3, 1.3))
            victim = random.choice(workers())
            before = records(steps_log)
            restarts = before[-1]["restart"]
            os.kill(victim, signal.SIGKILL)
            killed = time.time()

            def recovered():
                after = [r for r in records(steps_log) if r["restart"] > restarts and r["time"] > killed]
                return after[0] if after else None
            step = wait_for(recovered, limit=300)
            recoveries.append(step["time"] - killed)
            lost.append(before[-1]["step"] - (step["step"] - 1))
    finally:
        os.killpg(job.pid, signal.SIGTERM)
        try:
            job.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
    return recoveries, lost, []


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--impl", choices=["braid", "torch"], required=True)
    p.add_argument("--kills", type=int, default=50)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--model", default="cnn")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--commit-every", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--train-args", default="",
                   help="braid only: more `braid train` flags, e.g. '--zero-stage 3'")
    args = p.parse_args()
    random.seed(args.seed)
    with tempfile.TemporaryDirectory() as out:
        run = run_braid if args.impl == "braid" else run_torch
        recoveries, lost, setups = run(args, out)
    result = {"impl": args.impl, "model": args.model, "ranks": args.ranks, "kills": len(recoveries),
              "recovery_median_s": round(statistics.median(recoveries), 3),
              "recovery_p95_s": round(percentile(recoveries, 0.95), 3),
              "recovery_max_s": round(max(recoveries), 3),
              "steps_lost_max": max(lost), "steps_lost_median": statistics.median(lost),
              "recoveries_s": [round(r, 3) for r in recoveries]}
    if setups:
        result["round_setup_median_s"] = round(statistics.median(setups), 3)
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
